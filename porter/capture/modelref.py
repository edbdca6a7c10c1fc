"""A MODEL argument checked without importing torch: a built-in name, ``FILE.py:factory`` or
``package.module:factory``. A typo, a missing file or a path without ``:factory`` is
answered at once; importing the model (porter.capture.models) costs seconds of torch first.

A factory takes no arguments and returns ``(module, inputs)``: a ``torch.nn.Module`` and a
tuple of its forward's positional arguments (README, "Your own model")."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from porter.core.errors import PorterError
from porter.core.suggest import hint_with

# porter/capture/models/zoo.py BUILTINS, in its order (tests/capture/test_modelref.py keeps them equal)
BUILTIN_NAMES: tuple[str, ...] = ("transformer", "cnn", "mlp")
DEFAULT_MODEL = "transformer"
REF_HINT = "a MODEL is a built-in name (see `porter models`), FILE.py:factory or package.module:factory"


def is_file_ref(target: str) -> bool:
    """Whether the part before ':factory' names a file rather than an importable module."""
    return target.endswith(".py") or "/" in target or "\\" in target


def factories_in(path: Path) -> list[str]:
    """The file's top-level functions callable with no arguments, read (never run) from its source."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return []
    return [f.name for f in tree.body if isinstance(f, ast.FunctionDef) and not f.name.startswith("_")
            and len(f.args.args) + len(f.args.posonlyargs) == len(f.args.defaults) and not f.args.kwonlyargs]


def check_model_ref(text: str) -> None:
    """Raise the one-line PorterError a model load would, for what can be told without
    running the model: unknown names, missing files, a file given without its factory."""
    spec = (text or DEFAULT_MODEL).strip()
    if spec in BUILTIN_NAMES:
        return
    if ":" not in spec:
        if Path(spec).is_file() or spec.endswith(".py"):
            near = [f"{spec}:{name}" for name in factories_in(Path(spec))]
            raise PorterError("a model file needs the factory to call", path=spec,
                              hint=(f"did you mean {' or '.join(near[:3])}? " if near else "")
                                   + f"pass {spec}:FACTORY, FACTORY a function returning (torch.nn.Module, tuple_of_inputs)")
        raise PorterError(f"unknown model {spec!r}",
                          hint=hint_with(spec, BUILTIN_NAMES, f"built-ins: {', '.join(BUILTIN_NAMES)}; "
                                                              "or pass FILE.py:factory / package.module:factory"))
    target, _, attr = spec.rpartition(":")
    if not target or not attr:
        raise PorterError(f"model {spec!r} is not a factory reference", hint="use FILE.py:factory or package.module:factory")
    if is_file_ref(target):
        if not Path(target).is_file():
            raise PorterError("no such model file", path=target)
        return
    try:
        found = importlib.util.find_spec(target.partition(".")[0]) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise PorterError(f"model factory {spec}: no module named {target.partition('.')[0]!r} on the path",
                          hint="install the package, or pass FILE.py:factory")
