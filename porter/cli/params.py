"""Plain coercion of the CLI's str, Path, int and float parameters, without pydantic.

typer 0.2x coerces every parameter through a pydantic TypeAdapter: importing pydantic and
building the adapters costs ~0.1 s CPU in every command, a tenth of a small pair's whole
diagnosis. A parameter with one of those four types and no parser, range or clamp is
coerced here the way click did; anything else (bools given as text, enums, lists, ranges)
keeps typer's own coercion. A Path is only made a Path: porter checks each path where it
uses it (missing, unreadable, a directory, a FIFO: one line, exit 2), where typer's own
check printed its three-line usage block. With a typer that has no such layer this changes
nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args, get_origin

PLAIN = (str, int, float)


def install() -> bool:
    """Route plain parameters around the pydantic adapters; False when this typer has none."""
    try:
        from typer import _coercion, core
        from typer._click.exceptions import BadParameter
    except ImportError:  # typer before the pydantic layer: click coerces
        return False
    typer_build = getattr(core, "build_runtime_param", None)
    if typer_build is None or getattr(typer_build, "porter_plain", False):
        return typer_build is not None

    @dataclass(frozen=True)
    class PlainRuntimeParam(_coercion.RuntimeParam):  # type: ignore[misc, name-defined]
        """str/int/float by the type's own constructor; Path by Path() alone (porter checks paths)."""

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            if get_origin(self.annotation) is list:  # list[X]: each value as an X (one value alone too)
                (item,) = get_args(self.annotation)
                values = value if isinstance(value, (list, tuple)) else [value]
                return [self._one(item, v, param, ctx) for v in values]
            return self._one(self.annotation, value, param, ctx)

        def _one(self, kind: Any, value: Any, param: Any, ctx: Any) -> Any:
            if kind is Path:  # checked by porter where it is used: one line, exit 2 (typer's check
                # printed its usage block for an unreadable path, and only where it ran as non-root)
                return value if isinstance(value, Path) else Path(value)
            if type(value) is kind:
                return value
            try:
                return kind(value)
            except (TypeError, ValueError):
                name = {int: "integer", float: "number", str: "string"}[kind]
                raise BadParameter(f"{value!r} is not a valid {name}.", ctx=ctx, param=param) from None

    @dataclass(frozen=True)
    class FlagRuntimeParam(_coercion.RuntimeParam):  # type: ignore[misc, name-defined]
        """A bool: on/off flags arrive as bools (or None, unset); text goes to typer's own rule."""

        descriptor: Any = None

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            if isinstance(value, bool):
                return value
            return typer_build(self.descriptor)._coerce_value(value, param=param, ctx=ctx)

    def build(descriptor: Any) -> Any:
        args = {"parameter_info": descriptor.parameter_info, "annotation": descriptor.annotation}
        if plain(descriptor):
            return PlainRuntimeParam(**args)
        if descriptor.annotation is bool and descriptor.file_annotation is None and descriptor.parameter_info.parser is None:
            return FlagRuntimeParam(**args, descriptor=descriptor)
        return typer_build(descriptor)

    build.porter_plain = True  # type: ignore[attr-defined]
    core.build_runtime_param = build
    return True


def plain(descriptor: Any) -> bool:
    """A parameter whose value (or each value of a list) needs no more than its type's
    constructor."""
    info, kind = descriptor.parameter_info, descriptor.annotation
    if descriptor.file_annotation is not None or getattr(info, "parser", None) is not None:
        return False
    if get_origin(kind) is list:
        args = get_args(kind)
        kind = args[0] if len(args) == 1 else None
    if kind is Path:
        return True
    if kind not in PLAIN:
        return False
    if kind is str:
        return True
    return getattr(info, "min", None) is None and getattr(info, "max", None) is None and not getattr(info, "clamp", False)
