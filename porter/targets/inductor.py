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

from typing import Any

import torch

from porter.targets import inductor_attribution as attribution
from porter.targets.base import Prepared
from porter.targets.torch_common import TorchStack


# config that only adds bookkeeping (profiler ranges, provenance comments) or skips caches;
# the kernels and their order stay what a plain compile generates (tests check this)
RECORDING_CONFIG = {"cpp.enable_kernel_profile": True, "trace.provenance_tracking_level": 1,
                    "fx_graph_cache": False}


class TorchInductor(TorchStack):
    name = "inductor"
    module_attribution = "compiler"
    activation_source = "forward hooks on the eager module on the same device (compiled numerics: final output only)"
    native_module_outputs = False  # hooks inside the compiled graph would break it (ARCHITECTURE facts)

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
        """The submodule compiled by itself with inductor, whole graph or an error.

        Modules sharing one forward (every nn.Linear) recompile per instance; past dynamo's
        recompile limit it would quietly run eager, so that limit is made an error here.
        """
        import torch._dynamo

        compiled = torch.compile(module, backend="inductor", fullgraph=True)

        def call(*inputs: Any) -> Any:
            with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
                return compiled(*inputs)

        return call

    def versions_impl(self) -> dict[str, str]:
        return {"inductor": torch.__version__}


STACK = TorchInductor()
