"""Import torchax on a torch that dropped the named-dimension aten overloads.

torchax 0.0.13 builds its op tables at import time by naming overloads such as
``aten.prod.dim_Dimname`` and ``aten.norm.names_ScalarOpt_dim``; torch 2.13 removed them,
so ``import torchax`` raises AttributeError (fixed upstream in google/torchax #102, not yet
released). The tables only use those names as dictionary keys and list entries, so while
torchax imports we answer each missing-overload lookup with an inert placeholder, then put
torch's lookup back. The plain import is always tried first: once a fixed torchax is
installed the workaround never runs.
"""

from __future__ import annotations

import importlib
import sys
import threading
from dataclasses import dataclass, field
from types import ModuleType

_MISSING_OVERLOAD = "has no overload name"
_lock = threading.Lock()


@dataclass(frozen=True)
class MissingOverload:
    """Stands in for an aten overload this torch no longer has; inert unless called."""

    qualified: str  # e.g. "aten.prod.dim_Dimname"

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(f"{self.qualified} does not exist in this torch build")

    def name(self) -> str:
        return self.qualified


@dataclass
class ShimReport:
    """How torchax was imported: plainly, or with placeholders for these overloads."""

    shim_used: bool = False
    placeholders: list[str] = field(default_factory=list)
    first_error: str = ""


REPORT = ShimReport()


def is_missing_overload_error(exc: BaseException) -> bool:
    return isinstance(exc, AttributeError) and _MISSING_OVERLOAD in str(exc)


def _import_and_build_tables() -> ModuleType:
    """Import torchax and build its default environment, whose op tables load lazily.

    After a failed attempt, a module whose import failed is already gone from sys.modules;
    if the package itself failed, its submodules that did load are dropped too, so the
    package re-binds them (import skips the binding for modules already loaded).
    """
    if "torchax" not in sys.modules:
        for name in [n for n in sys.modules if n.startswith("torchax.")]:
            del sys.modules[name]
    torchax = importlib.import_module("torchax")
    torchax.default_env()
    _hide_from_torch_accelerator(torchax)
    return torchax


def _hide_from_torch_accelerator(torchax: ModuleType) -> None:
    """Stop torchax's import from turning every later torch.compile in the process into a crash.

    torchax renames PrivateUse1 to "jax" and registers a device module that says it is
    available, so torch.accelerator then reports a "jax" accelerator; dynamo asks the C++
    accelerator hooks for its current stream and fails with "PyTorch is not linked with
    support for jax devices" (seen with torch 2.13, torchax 0.0.13). porter drives torchax
    through its environment, never through torch.accelerator, so the module says unavailable.
    """
    device_module = getattr(torchax, "device_module", None)
    if device_module is not None and hasattr(device_module, "is_available"):
        device_module.is_available = lambda: False


def _import_with_placeholders(report: ShimReport) -> ModuleType:
    from torch._ops import OpOverloadPacket

    original = OpOverloadPacket.__getattr__

    def lookup(self, key: str):
        try:
            return original(self, key)
        except AttributeError as exc:
            if key.startswith("__") or not is_missing_overload_error(exc):
                raise
            qualified = f"{self}.{key}"
            if qualified not in report.placeholders:
                report.placeholders.append(qualified)
            return MissingOverload(qualified)  # not cached on the packet: torch stays as it was

    OpOverloadPacket.__getattr__ = lookup
    try:
        return _import_and_build_tables()
    finally:
        OpOverloadPacket.__getattr__ = original


def import_torchax() -> ModuleType:
    """Return the torchax module, working around the torch 2.13 overload removal if needed.

    Raises ImportError (torchax absent) or the original error when the failure is not the
    known missing-overload one.
    """
    with _lock:
        try:
            return _import_and_build_tables()
        except AttributeError as exc:
            if not is_missing_overload_error(exc):
                raise
            REPORT.first_error = str(exc)
        REPORT.shim_used = True
        return _import_with_placeholders(REPORT)
