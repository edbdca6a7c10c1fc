"""The torch model run through torchax on JAX/XLA (TPU, or JAX's default platform).

torchax turns the module into a pure JAX function of (weights, inputs); ``jax.jit``
compiles it. Module paths reach the trace through HLO op_name metadata: while jit traces
the function, a forward pre-hook enters ``jax.named_scope("porter.module:<name>")`` and the
forward hook leaves it, so every HLO op carries the scopes of the modules around it
(``jit(f)/porter.module:blocks.0/porter.module:blocks.0.attn/aten::gelu/erf``). Hooks fire
only while tracing, so the compiled program is the same with or without them (named
scopes are metadata). ``<name>`` is the qualified name with its dots: a scope name must
not contain "/" (the op_name separator); the reader turns the innermost
marker back into the porter path (``blocks/0/attn``) (porter/core/tags.py, used by the
XPlane reader), the same path the torch stacks use. Each op call a module's forward makes
is tagged too, ``porter.call:<k>`` (porter.targets.call_tags), so an HLO op names the call
it came from: (module, op, call index within the module).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from porter.core.errors import PorterError
from porter.core.tags import module_scope
from porter.targets.call_tags import torchax_call_scopes
from porter.targets.outputs import leaf_outputs
from porter.targets.base import (
    Activations,
    Availability,
    CaptureFailure,
    ModuleTracker,
    Prepared,
    Stack,
    first_float_tensor,
    module_hooks,
    tensor_leaves,
)

TPU_REMEDY = "capture on a TPU VM with `porter capture MODEL --on tpu -o DIR` and pass the bundle"
JAX_PLATFORM = {"cpu": "cpu", "tpu": "tpu", "cuda": "cuda", "rocm": "rocm"}




@contextlib.contextmanager
def jax_module_scopes(
    root: torch.nn.Module,
    tracker: ModuleTracker | None = None,
    on_output: Callable[[str, Any, Any], None] | None = None,
    on_call: Callable[..., None] | None = None,
) -> Iterator[None]:
    """module_hooks with a jax.named_scope per submodule, entered while a forward is traced.

    Nested modules nest scopes. The root gets the empty tag ``porter.module:``, so ops
    outside every submodule read back as module "" (not as torchax's op scopes).
    on_output(path, args, output) is called after each module's forward (with traced values
    under jit).
    """
    import jax

    with jax.named_scope(module_scope("")):
        with module_hooks(root, scope=lambda name: jax.named_scope(module_scope(name)),
                          tracker=tracker, on_output=on_output, on_call=on_call):
            yield


def jax_devices(platform: str | None = None) -> list[Any]:
    """jax.devices(platform); the first call of the process starts XLA's client, under
    porter.runtime.threads.one_cpu_while_xla_starts (one pool thread when the policy asks)."""
    import jax

    from porter.runtime.threads import one_cpu_while_xla_starts

    with one_cpu_while_xla_starts():
        return jax.devices(platform) if platform else jax.devices()


def _jax_device(device: str):
    return jax_devices(JAX_PLATFORM[device])[0]


def _jax_sketch(x: Any, idx: Any) -> dict[str, Any]:
    """porter.targets.sketch fields of one jax array, computed on the device (finite elements)."""
    import jax.numpy as jnp

    flat = x.reshape(-1)
    finite = jnp.isfinite(flat)
    clean = jnp.where(finite, flat, 0).astype(jnp.float32)
    return {"samples": flat[idx], "l2": jnp.sqrt(jnp.sum(clean * clean)), "max_abs": jnp.max(jnp.abs(clean), initial=0.0),
            "nan": jnp.sum(jnp.isnan(flat)), "inf": jnp.sum(jnp.isinf(flat))}


def _to_torch(value: Any) -> Any:
    """jax arrays (nested) -> torch CPU tensors (own memory), bf16 included (torchax's mapping)."""
    import jax
    import numpy as np
    from torchax.ops import mappings

    return jax.tree_util.tree_map(lambda a: mappings.j2t(np.array(a)) if isinstance(a, jax.Array) else a, value)


PLAIN = (bool, int, float, str, type(None))


def _program_key(module: torch.nn.Module, weights: dict[str, Any], leaves: list[Any], spec: Any, device: str) -> tuple:
    """What decides the program a module's call traces to, weights' values aside: each
    submodule's class and plain attributes (a flag such as LayerNorm's eps or a planted
    ``fragile``), weight shapes and dtypes, the call's tensor shapes and its other arguments."""
    structure = tuple((name, type(m).__module__, type(m).__qualname__,
                       tuple(sorted((k, repr(v)) for k, v in vars(m).items() if isinstance(v, PLAIN) and k != "training")))
                      for name, m in module.named_modules())
    shapes = tuple(sorted((k, tuple(v.shape), str(v.dtype)) for k, v in weights.items()))
    call = tuple((tuple(x.shape), str(x.dtype)) if isinstance(x, torch.Tensor) else ("value", repr(x)) for x in leaves)
    return (device, structure, shapes, call, str(spec))


class XlaStack(Stack):
    name = "xla"
    devices = ("tpu", "cpu", "cuda", "rocm")
    trace_format = "xplane"
    module_attribution = "hooks"
    dtypes = ("fp32", "bf16", "fp16")
    dtype_note = "JAX runs float64 as float32 unless jax_enable_x64 is set, which porter does not set"
    autocast_note = "torch.autocast does not reach torchax's jax arrays (the model would silently run float32)"

    def __init__(self) -> None:
        self._compiled_calls: dict[tuple, tuple[Any, dict[str, Any]]] = {}  # run_call's jitted programs

    # ---- availability ----
    def availability_impl(self, device: str) -> Availability:
        try:
            import jax  # noqa: F401 - importable is what is checked
        except ImportError as exc:
            return Availability(False, f"jax is not importable ({exc})", "pip install 'porter[xla]'")
        try:
            jax_devices(JAX_PLATFORM[device])
        except RuntimeError:
            shown = sorted({d.platform for d in jax_devices()})
            remedy = TPU_REMEDY if device == "tpu" else f"run on a host where jax sees a {device} device"
            return Availability(
                False, f"jax has no {device.upper()} backend here (jax.devices() shows only {', '.join(shown)})", remedy
            )
        try:
            from porter.targets.torchax_shim import import_torchax

            import_torchax()
        except ImportError as exc:
            return Availability(False, f"torchax is not importable ({exc})", "pip install 'porter[xla]'")
        return Availability(True)

    def resolve_device_impl(self) -> str:
        dev = jax_devices()[0]
        if dev.platform == "gpu":
            return "rocm" if "rocm" in str(getattr(dev.client, "platform_version", "")).lower() else "cuda"
        return dev.platform if dev.platform in JAX_PLATFORM else "cpu"

    # ---- prepare / run ----
    tuned_keys = ("xla_options", "jax_precision")

    def prepare_impl(self, model: Any, device: str) -> Prepared:
        return self.prepare_tuned_impl(model, device, {})

    def prepare_tuned_impl(self, model: Any, device: str, settings: dict[str, Any]) -> Prepared:
        """xla_options: XLA debug options for this executable only (compile(compiler_options));
        jax_precision: jax.default_matmul_precision while tracing. Neither touches another side."""
        import contextlib

        import jax

        from porter.targets.torchax_shim import REPORT, import_torchax

        if getattr(model, "program", None) is not None:  # a JAX program: jitted as it is
            from porter.targets import jax_program

            return jax_program.prepare(self, model, _jax_device(device), device, settings)
        tx = import_torchax()
        env = tx.default_env()
        module = model.module.eval()
        jdev = _jax_device(device)
        tracker = ModuleTracker()
        try:
            with torch.no_grad():
                weights, fn = tx.extract_jax(module, env)
            weights = jax.device_put(weights, jdev)
            inputs = tuple(jax.device_put(env.t2j_copy(x), jdev) if isinstance(x, torch.Tensor) else x
                           for x in model.example_inputs)
        except Exception as exc:
            raise CaptureFailure(f"torchax could not convert model {model.name}: {type(exc).__name__}: {exc}") from None

        def traced(w: Any, args: tuple[Any, ...]) -> Any:
            with torch.no_grad(), leaf_outputs(module), jax_module_scopes(module, tracker=tracker), \
                    torchax_call_scopes(env, lambda: tracker.current):
                return fn(w, args)  # a tuple of arrays whatever pytree the model returns

        jitted = jax.jit(traced)
        t0 = time.perf_counter()
        options = dict(settings.get("xla_options") or {})
        precision = settings.get("jax_precision")
        try:  # compile now, so an unsupported op fails here with its module named
            with jax.default_matmul_precision(precision) if precision else contextlib.nullcontext():
                compiled = jitted.lower(weights, inputs).compile(**({"compiler_options": options} if options else {}))
        except Exception as exc:
            from porter.targets.failure import describe_failure

            raise describe_failure(exc, module, self.name, tracked_module=tracker.failed_in) from exc
        info = {
            "jax_device": str(jdev),
            "compile_s": time.perf_counter() - t0,
            "torchax_shim": {"used": REPORT.shim_used, "placeholders": list(REPORT.placeholders)},
            **({"tuned": dict(settings)} if settings else {}),
        }
        return Prepared(
            self.name, device, model, call=lambda *a: compiled(weights, a), inputs=inputs, info=info,
            handle={"module": module, "fn": fn, "weights": weights, "env": env},
        )

    def sync_impl(self, prepared: Prepared, out: Any) -> None:
        import jax

        jax.block_until_ready(out)

    def to_torch_cpu_impl(self, out: Any) -> Any:
        return _to_torch(out)

    # ---- profile ----
    def profile_impl(self, prepared: Prepared, steps: int, raw_dir: Path) -> Path:
        import jax

        from porter.runtime.timing import timed_call

        step_s: list[float] = []
        cpu_s: list[float] = []
        logdir = Path(tempfile.mkdtemp(prefix="porter-xla-"))
        try:
            with jax.profiler.trace(str(logdir)):
                for i in range(steps):
                    with jax.profiler.StepTraceAnnotation("porter_step", step_num=i):
                        wall, cpu = timed_call(lambda: self.run(prepared))  # block_until_ready inside
                        step_s.append(wall)
                        cpu_s.append(cpu)
            found = sorted(logdir.rglob("*.xplane.pb"))
            if not found:
                raise PorterError("jax.profiler.trace wrote no .xplane.pb", path=logdir)
            dest = raw_dir / f"{prepared.model.name}.xplane.pb"
            shutil.copy2(found[-1], dest)
        finally:
            shutil.rmtree(logdir, ignore_errors=True)
        prepared.info.update(profiled_step_s=step_s, profiled_step_cpu_s=cpu_s)
        return dest

    # ---- activations ----
    def module_activations_impl(self, prepared: Prepared, full_modules: tuple[str, ...]) -> Activations:
        """Per-module sketches computed inside a jitted copy of the program (XLA numerics).

        The copy returns, per module, only its output's summary and sampled elements (and the
        full call of the modules in full_modules), so device and host memory stay a few
        activations whatever the model's depth. Extra outputs can change fusion at module
        boundaries; the profiled program never has them.
        """
        import jax
        import numpy as np

        from porter.targets.sketch import Summary, call_key, positions

        h = prepared.handle
        if "program" in h:
            from porter.targets import jax_program

            return jax_program.activations(prepared, full_modules, _jax_sketch)
        module, fn, weights, env = h["module"], h["fn"], h["weights"], h["env"]
        acts = Activations(source="sketches computed inside a jitted copy of the program (XLA numerics)")
        meta: dict[str, tuple[list[int], str]] = {}
        no_float: set[str] = set()

        def traced(w: Any, args: tuple[Any, ...]) -> Any:
            got: dict[str, Any] = {}
            calls: dict[str, Any] = {}

            def on_call(path: str, margs: Any, kwargs: Any, output: Any) -> None:
                if path in got or path in no_float:  # first call of a shared module
                    return
                t = first_float_tensor(output)
                if t is None:
                    no_float.add(path)
                    return
                got[path] = _jax_sketch(env.t2j_iso(t), positions(t.numel()))
                meta[path] = (list(t.shape), str(t.dtype).replace("torch.", ""))
                if path in full_modules:
                    for side, value in (("in", (margs, kwargs)), ("out", output)):
                        for i, leaf in enumerate(tensor_leaves(value)):
                            calls[call_key(path, side, i)] = env.t2j_iso(leaf)

            with torch.no_grad(), leaf_outputs(module), jax_module_scopes(module, on_call=on_call):
                fn(w, args)
            return got, calls

        got, calls = jax.jit(traced)(weights, prepared.inputs)
        for path, sk in got.items():
            shape, dtype = meta[path]
            acts.summaries[path] = Summary(shape=shape, dtype=dtype, numel=int(np.prod(shape, dtype=np.int64)),
                                           l2=float(sk["l2"]), max_abs=float(sk["max_abs"]),
                                           nan=int(sk["nan"]), inf=int(sk["inf"]))
            acts.samples[path] = np.asarray(sk["samples"], dtype=np.float64)
        acts.calls = {k: _to_torch(v) for k, v in calls.items()}
        acts.not_recorded = {p: "its output holds no floating-point tensor" for p in no_float}
        from porter.targets.torch_common import note_uncalled

        note_uncalled(acts, module)
        return acts

    def run_call_impl(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], device: str) -> Any:
        """The submodule as its own jitted JAX function (torchax), on the device. Tensor leaves of
        the call are the jit's arguments; every other argument is baked in as the call had it.

        Weights are arguments too, so modules that compute the same program (same class and
        plain attributes all the way down, same weight and input shapes, same other arguments:
        the twelve layers of a BERT) share one compile (``_compiled_calls``)."""
        import jax

        from porter.targets.torchax_shim import import_torchax

        tx = import_torchax()
        env = tx.default_env()
        jdev = _jax_device(device)
        with torch.no_grad():
            weights, fn = tx.extract_jax(module.eval(), env)
        weights = jax.device_put(weights, jdev)
        leaves, spec = torch.utils._pytree.tree_flatten((args, kwargs))
        is_tensor = [isinstance(x, torch.Tensor) for x in leaves]
        tensors = [jax.device_put(env.t2j_copy(x), jdev) for x in leaves if isinstance(x, torch.Tensor)]
        key = _program_key(module, weights, leaves, spec, device)
        if key not in self._compiled_calls:
            out: dict[str, Any] = {}  # the output's pytree structure, seen while tracing

            def call(w: Any, ts: list[Any]) -> list[Any]:
                it = iter(ts)
                a, kw = torch.utils._pytree.tree_unflatten([next(it) if t else x for x, t in zip(leaves, is_tensor)], spec)
                with torch.no_grad():
                    flat, out["spec"] = torch.utils._pytree.tree_flatten(fn(w, a, kw))
                out["arrays"] = [isinstance(x, jax.Array) for x in flat]
                out["others"] = [None if k else x for x, k in zip(flat, out["arrays"])]
                return [x for x, k in zip(flat, out["arrays"]) if k]

            self._compiled_calls[key] = (jax.jit(call), out)
        jitted, out = self._compiled_calls[key]
        arrays = iter(_to_torch(jax.block_until_ready(jitted(weights, tensors))))  # before the pytree is rebuilt:
        # jax does not know an HF ModelOutput, torch's pytree does
        flat = [next(arrays) if is_array else other for is_array, other in zip(out["arrays"], out["others"])]
        return torch.utils._pytree.tree_unflatten(flat, out["spec"])

    def run_op_impl(self, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any], device: str) -> Any:
        """One aten op executed eagerly through jax by torchax (its own lowering of the op)."""
        import jax

        from porter.targets.torchax_shim import import_torchax

        env = import_torchax().default_env()
        jdev = _jax_device(device)
        move = lambda x: env.j2t_iso(jax.device_put(env.t2j_copy(x), jdev)) if isinstance(x, torch.Tensor) else x  # noqa: E731
        with torch.no_grad(), env:
            out = op(*torch.utils._pytree.tree_map(move, args), **torch.utils._pytree.tree_map(move, kwargs))
        return torch.utils._pytree.tree_map(lambda t: t.jax() if hasattr(t, "jax") else t, out)

    # ---- facts ----
    def versions_impl(self) -> dict[str, str]:
        import jax
        import jaxlib

        from porter.targets.torchax_shim import import_torchax

        return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "torchax": import_torchax().__version__}

    def device_info_impl(self, device: str) -> dict[str, Any]:
        dev = _jax_device(device)
        info: dict[str, Any] = {"type": device, "name": dev.device_kind, "platform": dev.platform,
                                "runtime": str(getattr(dev.client, "platform_version", ""))}
        if device == "cpu":
            from porter.targets.ceilings import cpu_model_name

            info["name"] = cpu_model_name()
        return info

    def ceilings_impl(self, device: str, dtype: torch.dtype) -> dict[str, Any]:
        """Matmul FLOP/s and copy bytes/s measured through jax on the same device."""
        import jax
        import jax.numpy as jnp

        from porter.targets.ceilings import CPU_BUDGET_S, _best_seconds

        on_cpu = device == "cpu"
        n = 512 if on_cpu else 8192
        jdt = {torch.bfloat16: jnp.bfloat16, torch.float16: jnp.float16}.get(dtype, jnp.float32)
        jdev = _jax_device(device)
        key = jax.random.PRNGKey(0)
        a = jax.device_put(jax.random.normal(key, (n, n), jnp.float32).astype(jdt), jdev)
        mm = jax.jit(jnp.matmul)
        budget = CPU_BUDGET_S if on_cpu else 1.0
        t_mm = _best_seconds(lambda: mm(a, a).block_until_ready(), "cpu", budget)
        elems = (16 if on_cpu else 256) * (1 << 20) // 4
        src = jax.device_put(jnp.ones((elems,), jnp.float32), jdev)
        cp = jax.jit(lambda x: x + 0.0)
        t_cp = _best_seconds(lambda: cp(src).block_until_ready(), "cpu", budget)
        return {
            "matmul_flops_per_s": 2.0 * n**3 / t_mm,
            "matmul_shape": [n, n, n],
            "matmul_dtype": jnp.dtype(jdt).name,
            "copy_bytes_per_s": 2.0 * elems * 4 / t_cp,
            "copy_bytes": int(elems * 4),
            "method": "best of repeats, block_until_ready, jax.jit",
        }


STACK = XlaStack()
