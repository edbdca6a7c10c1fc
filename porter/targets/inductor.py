"""torch.compile with the inductor backend, profiled with torch.profiler (Kineto).

No hooks: they would break the graph at every module (see ARCHITECTURE facts). A
counting backend counts compiled regions and hands each dynamo graph to compile_fx
unchanged, with an inner_compile that records, per kernel call site, the FX nodes it
computes (inductor provenance tracking; see porter.targets.inductor_attribution). C++
kernels are built with ``cpp.enable_kernel_profile`` so each shows up in the trace
under its own name. Caches are off for this compile: a cache hit generates no code
and so would record nothing.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from typing import Any, Iterator

import torch

from porter.targets import inductor_attribution as attribution
from porter.targets.base import Prepared
from porter.targets.torch_common import TorchStack


# config that only adds bookkeeping (profiler ranges, provenance comments) or skips caches;
# the kernels and their order stay what a plain compile generates (tests check this)
RECORDING_CONFIG = {"cpp.enable_kernel_profile": True, "trace.provenance_tracking_level": 1,
                    "fx_graph_cache": False}


_TUNED = itertools.count()  # one code object per tuned compile (prepare_tuned_impl)
RECOMPILE_LIMIT = 4096  # one compile per module instance in a per-module accuracy run
COMPILE_LOGGERS = ("torch._dynamo", "torch._inductor", "torch.fx.experimental.symbolic_shapes")


class _ListHandler(logging.Handler):
    def __init__(self, sink: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.append(f"{record.name} {record.levelname}: {record.getMessage()}")


@contextlib.contextmanager
def captured_logs(sink: list[str]) -> Iterator[None]:
    """Send the compiler's log records (recompiles, graph breaks, warnings) to sink, not the terminal."""
    saved = []
    for name in COMPILE_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.handlers[:], logger.propagate))
        logger.handlers, logger.propagate = [_ListHandler(sink)], False
    try:
        yield
    finally:
        for logger, handlers, propagate in saved:
            logger.handlers, logger.propagate = handlers, propagate


class TorchInductor(TorchStack):
    name = "inductor"
    module_attribution = "compiler"
    activation_source = "forward hooks on the eager module on the same device (compiled numerics: final output only)"
    native_module_outputs = False  # hooks inside the compiled graph would break it (ARCHITECTURE facts)

    def __init__(self) -> None:
        self.compile_log: list[str] = []  # per-module/per-op compiles' log lines (porter.accuracy.live keeps them)

    def make_call(self, prepared: Prepared):
        from torch._inductor.compile_fx import compile_fx

        graphs: list[str] = []
        records: list[attribution.RegionRecord] = []

        def counting_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]):
            graphs.append(gm.__class__.__name__)
            return compile_fx(gm, example_inputs, inner_compile=attribution.recording_inner(records))

        compiled = torch.compile(prepared.handle, backend=counting_backend)
        prepared.info["_graphs"] = graphs
        prepared.info["_records"] = records

        def call(*inputs: Any) -> Any:
            with torch.no_grad():
                return compiled(*inputs)

        return call

    tuned_keys = ("compile_mode", "inductor")

    def prepare_tuned_impl(self, model: Any, device: str, settings: dict[str, Any]) -> Prepared:
        """torch.compile(backend="inductor", mode=..., options=...) of a function of its own: its
        code object is new, so dynamo's cache for it holds this compile only, and calls of
        another compile of the same module never walk this one's guards."""
        prepared = super().prepare_impl(model, device)
        module = prepared.handle
        name = f"porter_tuned_{next(_TUNED)}"
        scope: dict[str, Any] = {}
        exec(f"def {name}(*inputs):\n    return module(*inputs)\n", {"module": module}, scope)
        mode = settings.get("compile_mode")
        compiled = torch.compile(scope[name], backend="inductor", fullgraph=False,
                                 **({"mode": mode} if mode else {}), **({"options": settings["inductor"]} if settings.get("inductor") else {}))

        def call(*inputs: Any) -> Any:
            with torch.no_grad():
                return compiled(*inputs)

        prepared.call = call
        prepared.info["tuned"] = dict(settings)
        return prepared

    def first_run_impl(self, prepared: Prepared) -> Any:
        import torch._functorch.config as functorch_config
        import torch._inductor.config as inductor_config
        from torch._dynamo.utils import counters

        breaks_before = sum(counters["graph_break"].values())
        with inductor_config.patch(RECORDING_CONFIG), functorch_config.patch(enable_autograd_cache=False):
            out = self.run(prepared)
        prepared.info["compiled_regions"] = len(prepared.info["_graphs"])
        prepared.info["graph_breaks"] = sum(counters["graph_break"].values()) - breaks_before
        calls = attribution.region_calls(prepared.info["_records"])
        prepared.info["_calls"] = calls
        prepared.info["wrapper_calls"] = len(calls)
        prepared.info["wrapper_calls_with_module"] = sum(1 for c in calls if c.module)
        return out

    def attribute_modules_impl(self, prepared: Prepared, ops):
        return attribution.attribute(ops, prepared.info.get("_calls", []))

    def module_callable(self, module: torch.nn.Module):
        """The submodule compiled by itself with inductor: whole graph, static shapes, or an error.

        Modules sharing one forward (every nn.Linear) recompile per instance, so dynamo's
        recompile limit is raised for the call (a hit would quietly run eager, so it is made
        an error too); dynamo's and inductor's log lines go to self.compile_log, not the
        terminal.
        """
        return self._compiled(torch.compile(module, backend="inductor", fullgraph=True, dynamic=False))

    def op_callable(self, op: Any):
        """One aten op compiled by itself with inductor (static shapes)."""
        return self._compiled(torch.compile(lambda *a, **k: op(*a, **k), backend="inductor", fullgraph=True, dynamic=False))

    def _compiled(self, compiled: Any):
        import torch._dynamo

        def call(*args: Any, **kwargs: Any) -> Any:
            with captured_logs(self.compile_log), torch._dynamo.config.patch(
                    fail_on_recompile_limit_hit=True, recompile_limit=RECOMPILE_LIMIT,
                    accumulated_recompile_limit=RECOMPILE_LIMIT * 8):
                return compiled(*args, **kwargs)

        return call

    def versions_impl(self) -> dict[str, str]:
        return {"inductor": torch.__version__}


STACK = TorchInductor()
