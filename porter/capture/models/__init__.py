"""Model specs: a built-in (porter/capture/models/zoo.py) or a user factory.

A MODEL argument is a built-in name (``transformer``, ``cnn``, ``mlp``), or
``path/to/file.py:factory`` or ``package.module:factory``, where ``factory()`` returns
``(torch.nn.Module, tuple_of_example_inputs)``, or a JAX program (porter/capture/models/jaxprog.py:
``(fn, (params, *inputs))`` or ``(flax.nnx.Module, inputs)``). The fingerprint hashes the module's
structure (qualified names, classes, parameter shapes and dtypes) so later stages can
refuse to compare bundles of different models.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from porter.capture.modelref import DEFAULT_MODEL, check_model_ref, is_file_ref
from porter.core.errors import PorterError


@dataclass
class ModelSpec:
    name: str
    module: Any  # a torch.nn.Module in eval mode; None for a JAX program
    example_inputs: tuple[Any, ...]
    dtype: torch.dtype  # of the parameters (the model's compute dtype)
    fingerprint: str
    source: str = ""  # "builtin" or the factory reference
    program: Any = None  # a porter.capture.models.jaxprog.JaxProgram (runs on the xla stack only)

    @property
    def param_count(self) -> int:
        if self.program is not None:
            from porter.capture.models.jaxprog import param_count

            return param_count(self.program)
        return sum(p.numel() for p in self.module.parameters())

    def input_shapes(self) -> list[list[int]]:
        return [list(x.shape) for x in self.example_inputs if isinstance(x, torch.Tensor) or
                (self.program is not None and hasattr(x, "shape"))]

    def module_paths(self) -> list[str]:
        """Every submodule's porter path ('blocks/0/attn'), root excluded."""
        if self.program is not None:
            return list(self.program.module_paths)
        return [n.replace(".", "/") for n, _ in self.module.named_modules() if n]


def module_param_signatures(spec: ModelSpec) -> list[list[Any]]:
    """[[module path, [[shape, sum, sum of squares], ...]], ...] of each module's own parameters, in
    module order (root ""): what porter.analysis.modulemap pairs a model and its rewrite by."""
    if spec.program is not None:
        from porter.capture.models.jaxprog import module_param_signatures as of_program

        return of_program(spec.program)
    out = []
    for name, mod in spec.module.named_modules():
        params = [[list(p.shape), float(p.detach().double().sum()), float(p.detach().double().square().sum())]
                  for _, p in mod.named_parameters(recurse=False)]
        out.append([name.replace(".", "/"), params])
    return out


TORCH_DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}


def program_spec(name: str, program: Any, source: str) -> ModelSpec:
    """A ModelSpec for a JAX program (porter.capture.models.jaxprog)."""
    from porter.capture.models import jaxprog

    dtype = TORCH_DTYPES.get(jaxprog.compute_dtype(program), torch.float32)
    return ModelSpec(name, None, tuple(program.inputs), dtype, jaxprog.fingerprint(program), source, program)


def fingerprint(module: torch.nn.Module) -> str:
    """Hash of structure: names, classes, parameter/buffer shapes and dtypes (not values)."""
    h = hashlib.sha256()
    for name, mod in module.named_modules():
        h.update(f"m {name} {type(mod).__module__}.{type(mod).__qualname__}\n".encode())
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        h.update(f"t {name} {tuple(t.shape)} {t.dtype}\n".encode())
    return h.hexdigest()[:16]


def _module_dtype(module: torch.nn.Module) -> torch.dtype:
    for p in module.parameters():
        if p.is_floating_point():
            return p.dtype
    return torch.get_default_dtype()


def root_cause(exc: BaseException) -> str:
    """'Type: message' of the exception, and of the innermost one it was raised from when
    that differs: a library's lazy import re-raises the real cause as its __cause__
    ("Could not import module 'BertModel'" from "operator torchvision::nms does not exist")."""
    inner = exc
    while inner.__cause__ is not None or (inner.__context__ is not None and not inner.__suppress_context__):
        inner = inner.__cause__ or inner.__context__
    text = f"{type(exc).__name__}: {exc}"
    if inner is not exc:
        text += f" (caused by {type(inner).__name__}: {inner})"
    return text


@contextlib.contextmanager
def _importable_beside(path: Path) -> Iterator[None]:
    """While a model file runs, the modules in its folder import by name, as they do under
    `python FILE.py` (a file of models that shares helpers with its neighbours)."""
    folder = str(path.resolve().parent)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        yield
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)


def _load_factory(ref: str) -> Callable[[], Any]:
    check_model_ref(ref)  # a reference, to a file that exists
    target, _, attr = ref.rpartition(":")
    try:
        if is_file_ref(target):
            path = Path(target)
            mod_name = f"porter_user_model_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]}"
            spec = importlib.util.spec_from_file_location(mod_name, path)
            if spec is None or spec.loader is None:
                raise PorterError("cannot load as a Python module", path=path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[mod_name] = mod  # so pickling/dynamo can find its classes
            with _importable_beside(path):
                spec.loader.exec_module(mod)
        else:
            mod = importlib.import_module(target)
    except PorterError:
        raise
    except Exception as exc:
        raise PorterError(f"model factory {ref}: importing {target} failed: {root_cause(exc)}",
                          hint="porter --debug shows the full traceback") from exc
    factory = getattr(mod, attr, None)
    if not callable(factory):
        raise PorterError(f"model factory {ref}: {target} has no callable {attr!r}")
    return factory


def from_factory(name: str, factory: Callable[[], Any], source: str) -> ModelSpec:
    """Call factory() and check it returned (nn.Module, tuple of inputs)."""
    try:
        made = factory()
    except Exception as exc:
        raise PorterError(f"model factory {source} raised {root_cause(exc)}",
                          hint="porter --debug shows the full traceback") from exc
    if not (isinstance(made, tuple) and len(made) == 2):
        raise PorterError(
            f"model factory {source} returned {type(made).__name__}, not (torch.nn.Module, tuple_of_inputs)"
        )
    module, inputs = made
    if not isinstance(module, torch.nn.Module):
        from porter.capture.models import jaxprog

        if jaxprog.looks_like_jax(module):
            return program_spec(name, jaxprog.from_made(module, inputs, source), source)
        raise PorterError(f"model factory {source} returned {type(module).__name__} as the model, not a torch.nn.Module")
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if not isinstance(inputs, (tuple, list)) or not any(isinstance(x, torch.Tensor) for x in inputs):
        raise PorterError(f"model factory {source} returned {type(inputs).__name__} as inputs, not a tuple of tensors")
    module.eval()
    return ModelSpec(name, module, tuple(inputs), _module_dtype(module), fingerprint(module), source)


def load_model(spec: str) -> ModelSpec:
    """A built-in name or a FILE.py:factory / package.module:factory reference."""
    from porter.capture.models.zoo import BUILTINS

    spec = (spec or DEFAULT_MODEL).strip()
    if spec in BUILTINS:
        return from_factory(spec, BUILTINS[spec].factory, "builtin")
    check_model_ref(spec)
    name = spec.rpartition(":")[2]
    return from_factory(name, _load_factory(spec), spec)


__all__ = ["DEFAULT_MODEL", "ModelSpec", "fingerprint", "from_factory", "load_model", "module_param_signatures"]
