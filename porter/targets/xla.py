"""The torch model run through torchax on JAX/XLA (TPU, or JAX's default platform).

torchax turns the module into a pure JAX function of (weights, inputs); ``jax.jit``
compiles it. Module paths reach the trace through HLO op_name metadata: while jit traces
the function, a forward pre-hook enters ``jax.named_scope("porter.module:<name>")`` and the
forward hook leaves it, so every HLO op carries the scopes of the modules around it
(``jit(f)/porter.module:blocks.0/porter.module:blocks.0.attn/aten::gelu/erf``). Hooks fire
only while tracing, so the compiled program is the same with or without them (named
scopes are metadata). ``<name>`` is the qualified name with its dots: a scope name must
not contain "/" (the op_name separator); the reader turns the innermost
marker back into the porter path (``blocks/0/attn``) (profilers/porter_tags.py, used by the
XPlane reader), the same path the torch stacks use.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from porter.errors import PorterError
from porter.targets.base import (
    MODULE_RANGE_PREFIX,
    Activations,
    Availability,
    CaptureFailure,
    ModuleTracker,
    Prepared,
    Stack,
    first_tensor,
    module_hooks,
)

TPU_REMEDY = "capture on a TPU VM with `porter capture MODEL --on tpu -o DIR` and pass the bundle"
JAX_PLATFORM = {"cpu": "cpu", "tpu": "tpu", "cuda": "cuda", "rocm": "rocm"}


def scope_name(qualified_name: str) -> str:
    """named_modules() name -> the jax.named_scope that tags its ops ('porter.module:blocks.0.attn')."""
    return f"{MODULE_RANGE_PREFIX}{qualified_name}"


@contextlib.contextmanager
def jax_module_scopes(
    root: torch.nn.Module,
    tracker: ModuleTracker | None = None,
    on_output: Callable[[str, Any, Any], None] | None = None,
) -> Iterator[None]:
    """module_hooks with a jax.named_scope per submodule, entered while a forward is traced.

    Nested modules nest scopes. The root gets the empty tag ``porter.module:``, so ops
    outside every submodule read back as module "" (not as torchax's op scopes).
    on_output(path, args, output) is called after each module's forward (with traced values
    under jit).
    """
    import jax

    with jax.named_scope(scope_name("")):
        with module_hooks(root, scope=lambda name: jax.named_scope(scope_name(name)),
                          tracker=tracker, on_output=on_output):
            yield


def _jax_device(device: str):
    import jax

    return jax.devices(JAX_PLATFORM[device])[0]


def _to_torch(value: Any) -> Any:
    """jax arrays (nested) -> torch CPU tensors (own memory), bf16 included (torchax's mapping)."""
    import jax
    import numpy as np
    from torchax.ops import mappings

    return jax.tree_util.tree_map(lambda a: mappings.j2t(np.array(a)) if isinstance(a, jax.Array) else a, value)


class XlaStack(Stack):
    name = "xla"
    devices = ("tpu", "cpu", "cuda", "rocm")
    trace_format = "xplane"
    module_attribution = "hooks"

    # ---- availability ----
    def availability_impl(self, device: str) -> Availability:
        try:
            import jax
        except ImportError as exc:
            return Availability(False, f"jax is not importable ({exc})", "pip install 'porter[xla]'")
        try:
            jax.devices(JAX_PLATFORM[device])
        except RuntimeError:
            shown = sorted({d.platform for d in jax.devices()})
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
        import jax

        dev = jax.devices()[0]
        if dev.platform == "gpu":
            return "rocm" if "rocm" in str(getattr(dev.client, "platform_version", "")).lower() else "cuda"
        return dev.platform if dev.platform in JAX_PLATFORM else "cpu"

    # ---- prepare / run ----
    def prepare_impl(self, model: Any, device: str) -> Prepared:
        import jax

        from porter.targets.torchax_shim import REPORT, import_torchax

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
            with torch.no_grad(), jax_module_scopes(module, tracker=tracker):
                return fn(w, args)

        jitted = jax.jit(traced)
        t0 = time.perf_counter()
        try:  # compile now, so an unsupported op fails here with its module named
            compiled = jitted.lower(weights, inputs).compile()
        except Exception as exc:
            from porter.targets.failure import describe_failure

            raise describe_failure(exc, module, self.name, tracked_module=tracker.failed_in) from exc
        info = {
            "jax_device": str(jdev),
            "compile_s": time.perf_counter() - t0,
            "torchax_shim": {"used": REPORT.shim_used, "placeholders": list(REPORT.placeholders)},
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

        step_s: list[float] = []
        logdir = Path(tempfile.mkdtemp(prefix="porter-xla-"))
        try:
            with jax.profiler.trace(str(logdir)):
                for i in range(steps):
                    with jax.profiler.StepTraceAnnotation("porter_step", step_num=i):
                        t0 = time.perf_counter()
                        self.run(prepared)  # block_until_ready inside the step
                        step_s.append(time.perf_counter() - t0)
            found = sorted(logdir.rglob("*.xplane.pb"))
            if not found:
                raise PorterError("jax.profiler.trace wrote no .xplane.pb", path=logdir)
            dest = raw_dir / f"{prepared.model.name}.xplane.pb"
            shutil.copy2(found[-1], dest)
        finally:
            shutil.rmtree(logdir, ignore_errors=True)
        prepared.info["profiled_step_s"] = step_s
        return dest

    # ---- activations ----
    def module_activations_impl(self, prepared: Prepared, cap_bytes: int) -> Activations:
        """Per-module outputs from the compiled program, returned as extra jit outputs.

        A separate jit of the same function that also returns each module's output: XLA
        numerics (fused, compiled) rather than op-by-op eager. Extra outputs can change
        fusion at module boundaries; the profiled program never has them.
        """
        import jax

        h = prepared.handle
        module, fn, weights = h["module"], h["fn"], h["weights"]
        env = h["env"]
        acts = Activations(source="extra outputs of a jitted copy of the program (XLA numerics)")

        def traced(w: Any, args: tuple[Any, ...]) -> Any:
            outs: dict[str, Any] = {}
            ins: dict[str, Any] = {}

            def on_output(path: str, margs: Any, output: Any) -> None:
                for store, value in ((ins, margs), (outs, output)):
                    t = first_tensor(value)
                    if t is not None and path not in store:  # first call of a shared module
                        store[path] = env.t2j_iso(t)

            with torch.no_grad(), jax_module_scopes(module, on_output=on_output):
                res = fn(w, args)
            return res, outs, ins

        _, outs, ins = jax.jit(traced)(weights, prepared.inputs)
        for store, got in ((acts.outputs, outs), (acts.inputs, ins)):
            for path in sorted(got):
                size = int(got[path].size * got[path].dtype.itemsize)
                if acts.nbytes + size > cap_bytes:
                    acts.skipped.append(path)
                    continue
                store[path] = _to_torch(got[path])
                acts.nbytes += size
        acts.skipped = sorted(set(acts.skipped))
        return acts

    def run_module_impl(self, module: torch.nn.Module, inputs: tuple[Any, ...], device: str) -> Any:
        """The submodule as its own jitted JAX function (torchax), on the device."""
        import jax

        from porter.targets.torchax_shim import import_torchax

        tx = import_torchax()
        env = tx.default_env()
        jdev = _jax_device(device)
        with torch.no_grad():
            weights, fn = tx.extract_jax(module.eval(), env)
        weights = jax.device_put(weights, jdev)
        args = tuple(jax.device_put(env.t2j_copy(x), jdev) if isinstance(x, torch.Tensor) else x for x in inputs)
        out = jax.jit(fn)(weights, args)
        jax.block_until_ready(out)
        return out

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
