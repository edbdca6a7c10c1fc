"""JAX programs as MODEL: what a factory may return besides a torch module, made one shape.

A factory may return

* ``(fn, (params, *inputs))``: a function JAX can jit, called ``fn(params, *inputs)``; its
  modules are the ``jax.named_scope`` scopes it opens (HLO op_name metadata carries them to
  the trace, and profilers/xla_hlo.py reads them as module paths);
* ``(module, (*inputs,))`` with a Flax NNX module: split into its graph and state, run as
  ``merge(graph, state)(*inputs)``; each submodule's call is wrapped in a
  ``porter.module:<path>`` scope while tracing, so its ops carry the module tree's path
  (``blocks/0/attn``), as a torch module's do;
* ``(module, (*inputs,))`` with an Equinox module: partitioned into its arrays and the rest,
  its fields' submodules scoped the same way (``layers/0``).

All run on the xla stack (porter/targets/jax_program.py) through the same capture workflow,
bundle, timing and profiler as a torch model there.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from porter.core.errors import PorterError
from porter.core.tags import module_path, module_scope

OnOutput = Callable[[str, Any], None]  # (porter module path, the module's output) while tracing


@dataclass
class JaxProgram:
    """A JAX program porter runs: pure ``call(params, inputs, on_output)``."""

    kind: str  # "function" or "nnx"
    params: Any  # pytree of arrays: the weights (traced as the program's first argument)
    inputs: tuple[Any, ...]
    run: Callable[[Any, tuple[Any, ...], OnOutput | None], Any]
    module_paths: tuple[str, ...] = ()  # porter paths, root excluded; () for a function (scopes known after tracing)
    classes: tuple[str, ...] = field(default=())  # the module classes (the fingerprint's structure)
    modules: Callable[[], dict[str, Any]] | None = None  # porter path -> the submodule object, to run one alone

    def module_at(self, path: str) -> Any | None:
        """The submodule at a porter path, callable on its own inputs (None for a function's scopes)."""
        return self.modules().get(path) if self.modules is not None else None

    def call(self, params: Any, inputs: tuple[Any, ...], on_output: OnOutput | None = None) -> Any:
        return self.run(params, inputs, on_output)


def _home(obj: Any) -> str:
    """The library a model's class comes from, by its bases ('flax' for a user's nnx.Module)."""
    homes = [c.__module__.split(".")[0] for c in type(obj).__mro__]
    return next((h for h in homes if h in ("flax", "equinox")), homes[0])


def looks_like_jax(obj: Any) -> bool:
    """Whether a factory's model is a JAX program, by its class's home, before importing jax."""
    return _home(obj) in ("flax", "equinox", "jax", "jaxlib") or (callable(obj) and not _is_torch_module(obj))


def _is_torch_module(obj: Any) -> bool:
    return any(c.__module__.startswith("torch.nn") and c.__name__ == "Module" for c in type(obj).__mro__)


def from_made(model: Any, args: Any, source: str) -> JaxProgram:
    """The factory's (model, args) as a JaxProgram, or a one-line error saying what it must be."""
    if not isinstance(args, (tuple, list)):
        args = (args,)
    home = _home(model)
    if home == "flax":
        return _nnx(model, tuple(args), source)
    if home == "equinox":
        return _equinox(model, tuple(args), source)
    if not callable(model):
        raise PorterError(f"model factory {source} returned {type(model).__name__} as the model: not a torch.nn.Module, "
                          "a Flax NNX module or a function")
    if len(args) < 1:
        raise PorterError(f"model factory {source} returned a function with no arguments",
                          hint="return (fn, (params, *inputs)): porter calls fn(params, *inputs)")
    _check_arrays(args, source)
    fn = model

    def run(params: Any, inputs: tuple[Any, ...], on_output: OnOutput | None) -> Any:
        with pallas_scopes():
            return fn(params, *inputs)  # the user's named scopes are the modules (no porter tag: none is needed)

    return JaxProgram("function", args[0], tuple(args[1:]), run)


def _check_arrays(args: tuple[Any, ...], source: str) -> None:
    import jax

    leaves = jax.tree_util.tree_leaves(args)
    if not any(hasattr(x, "shape") and hasattr(x, "dtype") for x in leaves):
        raise PorterError(f"model factory {source} returned arguments with no arrays",
                          hint="return (fn, (params, *inputs)) with jax or numpy arrays")


def _nnx(model: Any, inputs: tuple[Any, ...], source: str) -> JaxProgram:
    from flax import nnx

    if not isinstance(model, nnx.Module):
        raise PorterError(f"model factory {source} returned a {type(model).__name__} from flax: porter takes Flax NNX "
                          "modules (flax.nnx.Module)", hint="linen: return (fn, (variables, *inputs)) with "
                                                             "fn = lambda v, *x: module.apply(v, *x)")
    _check_arrays(inputs, source)
    graphdef, state = nnx.split(model)
    paths = tuple(module_path(_qualified(p)) for p, node in nnx.iter_graph(model)
                  if p and isinstance(node, nnx.Module) and callable(node))  # a module, not a container (nnx.List)
    classes = tuple(sorted({f"{type(n).__module__}.{type(n).__qualname__}" for _, n in nnx.iter_graph(model)
                            if isinstance(n, nnx.Module)}))

    def run(params: Any, args: tuple[Any, ...], on_output: OnOutput | None) -> Any:
        import jax

        merged = nnx.merge(graphdef, params)
        with jax.named_scope(module_scope("")), nnx_scopes(merged, on_output), pallas_scopes():
            return merged(*args)

    def modules() -> dict[str, Any]:
        return {module_path(_qualified(p)): n for p, n in nnx.iter_graph(model) if isinstance(n, nnx.Module) and callable(n)}

    return JaxProgram("nnx", state, inputs, run, paths, classes, modules)


def eqx_modules(root: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """(path, module) of an Equinox module and every submodule in its fields (lists and tuples
    of modules included), root first: the module tree as named_modules() walks a torch one."""
    import dataclasses

    import equinox as eqx

    yield prefix, root
    for f in dataclasses.fields(root):
        value = getattr(root, f.name, None)
        items = list(enumerate(value)) if isinstance(value, (list, tuple)) else [(None, value)]
        for i, v in items:
            if isinstance(v, eqx.Module):
                yield from eqx_modules(v, prefix + ((f.name,) if i is None else (f.name, i)))


def _equinox(model: Any, inputs: tuple[Any, ...], source: str) -> JaxProgram:
    import equinox as eqx

    _check_arrays(inputs, source)
    params, static = eqx.partition(model, eqx.is_array)
    paths = tuple(module_path(_qualified(p)) for p, m in eqx_modules(model) if p and callable(m))
    classes = tuple(sorted({f"{type(m).__module__}.{type(m).__qualname__}" for _, m in eqx_modules(model)}))

    def run(p: Any, args: tuple[Any, ...], on_output: OnOutput | None) -> Any:
        import jax

        merged = eqx.combine(p, static)
        with jax.named_scope(module_scope("")), module_call_scopes(eqx_modules(merged), on_output), pallas_scopes():
            return merged(*args)

    def modules() -> dict[str, Any]:
        return {module_path(_qualified(p)): m for p, m in eqx_modules(model) if callable(m)}

    return JaxProgram("equinox", params, inputs, run, paths, classes, modules)


def _qualified(path: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in path)


def nnx_scopes(root: Any, on_output: OnOutput | None = None) -> contextlib.AbstractContextManager[None]:
    """module_call_scopes over a Flax NNX module tree."""
    from flax import nnx

    return module_call_scopes(((p, n) for p, n in nnx.iter_graph(root) if isinstance(n, nnx.Module)), on_output)


@contextlib.contextmanager
def module_call_scopes(tree: Any, on_output: OnOutput | None = None) -> Iterator[None]:
    """While a forward is traced: each submodule's __call__ (tree: (path, module) pairs, root's
    path empty) inside a jax.named_scope of its porter tag, and on_output(path, output) after it
    (the hooks torch modules get). The classes' __call__ are patched where they are defined and
    put back on exit; a module called again (shared weights) keeps its first path."""
    import jax

    nodes = list(tree)
    paths = {id(node): _qualified(p) for p, node in nodes if p}
    owners: dict[type, Any] = {}
    for _, node in nodes:
        owner = next((c for c in type(node).__mro__ if "__call__" in c.__dict__), None)
        if owner is not None and owner not in owners and owner is not object:
            owners[owner] = owner.__dict__["__call__"]

    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            name = paths.get(id(self))
            if name is None:
                return original(self, *args, **kwargs)
            with jax.named_scope(module_scope(name)):
                out = original(self, *args, **kwargs)
            if on_output is not None:
                on_output(module_path(name), out)
            return out

        return call

    try:
        for owner, original in owners.items():
            setattr(owner, "__call__", wrap(original))
        yield
    finally:
        for owner, original in owners.items():
            setattr(owner, "__call__", original)


@contextlib.contextmanager
def pallas_scopes() -> Iterator[None]:
    """While a program is traced: every ``pl.pallas_call`` kernel inside a ``porter.kernel:<name>``
    scope, so all its ops read back as one op, ``pallas_call(<name>)`` (class custom_kernel), in
    its module, never as the loop of HLO ops an interpreted kernel becomes. On XLA:CPU
    (interpret=True) XLA fuses that HLO with its neighbours (an optimization barrier does not
    survive its pipeline), so the kernel is one member of the fusion, its share estimated as any
    member's; a compiled kernel (Mosaic on TPU, Triton on GPU) is its own custom call. A kernel
    imported by its bare name before the capture (`from jax.experimental.pallas import
    pallas_call`) is not seen."""
    try:
        from jax.experimental import pallas as pl
    except ImportError:
        yield
        return
    import jax

    from porter.core.tags import kernel_scope

    original = pl.pallas_call

    def tagged(kernel: Any, *args: Any, **kwargs: Any) -> Any:
        call = original(kernel, *args, **kwargs)
        name = kwargs.get("name") or getattr(kernel, "__name__", "kernel")

        def scoped(*operands: Any) -> Any:
            with jax.named_scope(kernel_scope(str(name))):
                return call(*operands)

        return scoped

    pl.pallas_call = tagged
    try:
        yield
    finally:
        pl.pallas_call = original


def fingerprint(program: JaxProgram) -> str:
    """Hash of structure: kind, module classes, parameter paths, shapes and dtypes (not values)."""
    import jax

    h = hashlib.sha256(f"{program.kind}\n".encode())
    for c in program.classes:
        h.update(f"c {c}\n".encode())
    for path, leaf in jax.tree_util.tree_flatten_with_path(program.params)[0]:
        h.update(f"t {jax.tree_util.keystr(path)} {tuple(getattr(leaf, 'shape', ()))} {getattr(leaf, 'dtype', '')}\n".encode())
    return h.hexdigest()[:16]


def param_count(program: JaxProgram) -> int:
    import jax

    return int(sum(getattr(x, "size", 0) for x in jax.tree_util.tree_leaves(program.params)))


def compute_dtype(program: JaxProgram) -> str:
    """The first floating parameter's dtype name ('float32'), else float32."""
    import jax
    import jax.numpy as jnp

    for x in jax.tree_util.tree_leaves(program.params):
        if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating):
            return jnp.dtype(x.dtype).name
    return "float32"


def cast(program: JaxProgram, dtype_name: str) -> JaxProgram:
    """The program with its floating parameters and inputs in dtype_name (a precision port)."""
    import dataclasses

    import jax
    import jax.numpy as jnp

    dt = jnp.dtype(dtype_name)

    def one(x: Any) -> Any:
        return x.astype(dt) if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating) else x

    return dataclasses.replace(program, params=jax.tree_util.tree_map(one, program.params),
                               inputs=tuple(jax.tree_util.tree_map(one, program.inputs)),
                               modules=None)  # the module objects hold the uncast weights


def module_param_signatures(program: JaxProgram) -> list[list[Any]]:
    """The NNX module tree's own parameters per module (as the torch side's), in tree order; a
    function's parameters belong to no module: []."""
    import numpy as np

    if program.kind == "equinox":
        import dataclasses

        import equinox as eqx

        out = []
        for path, m in eqx_modules(program.params):
            own = [np.asarray(getattr(m, f.name), dtype=np.float64) for f in dataclasses.fields(m)
                   if eqx.is_array(getattr(m, f.name, None))]
            out.append([module_path(_qualified(path)), [[list(a.shape), float(a.sum()), float((a * a).sum())] for a in own]])
        return out
    if program.kind != "nnx":
        return []
    import jax

    by_module: dict[str, list[list[Any]]] = {"": []}
    for path in program.module_paths:
        by_module[path] = []
    for keypath, leaf in jax.tree_util.tree_flatten_with_path(program.params)[0]:
        parts = [str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k)))) for k in keypath]
        owner = "/".join(parts[:-1])  # the Variable's module: its path less the parameter's own name
        while owner not in by_module:
            owner = owner.rpartition("/")[0]
        a = np.asarray(leaf, dtype=np.float64)
        by_module[owner].append([list(a.shape), float(a.sum()), float((a * a).sum())])
    return [[path, params] for path, params in by_module.items()]
