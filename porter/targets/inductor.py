"""torch.compile with the inductor backend, profiled with torch.profiler (Kineto).

No hooks: they would break the graph at every module (see ARCHITECTURE facts). A
counting backend records each compiled region's dynamo graph (for module paths and the
region count) and hands it to inductor unchanged; C++ kernels are built with
``cpp.enable_kernel_profile`` so each shows up in the trace under its own name.
Module paths then come from porter.targets.inductor_attribution.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from porter.targets import inductor_attribution as attribution
from porter.targets.base import Prepared
from porter.targets.torch_common import TorchStack


def loaded_code_files() -> set[str]:
    from torch._inductor.codecache import PyCodeCache

    mods = PyCodeCache.modules
    return {getattr(m, "__file__", "") for m in (mods.values() if isinstance(mods, dict) else mods)} - {""}


class TorchInductor(TorchStack):
    name = "inductor"
    module_attribution = "compiler"
    activation_source = "forward hooks on the eager module on the same device (compiled numerics: final output only)"
    native_module_outputs = False  # hooks inside the compiled graph would break it (ARCHITECTURE facts)

    def make_call(self, prepared: Prepared):
        from torch._inductor.compile_fx import compile_fx

        graphs: list[dict[str, str]] = []

        def counting_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]):
            graphs.append(attribution.node_modules(gm))
            return compile_fx(gm, example_inputs)

        compiled = torch.compile(prepared.handle, backend=counting_backend)
        prepared.info["_graphs"] = graphs

        def call(*inputs: Any) -> Any:
            with torch.no_grad():
                return compiled(*inputs)

        return call

    def first_run_impl(self, prepared: Prepared) -> Any:
        import torch._dynamo
        import torch._inductor.config as inductor_config
        from torch._dynamo.utils import counters

        before = loaded_code_files()
        breaks_before = sum(counters["graph_break"].values())
        with inductor_config.patch({"cpp.enable_kernel_profile": True}):
            out = self.run(prepared)
        graphs = prepared.info["_graphs"]
        prepared.info["compiled_regions"] = len(graphs)
        prepared.info["graph_breaks"] = sum(counters["graph_break"].values()) - breaks_before
        files = sorted(loaded_code_files() - before)
        prepared.info["_calls"] = attribution.wrapper_sources([Path(f) for f in files])
        prepared.info["wrapper_calls"] = len(prepared.info["_calls"])
        return out

    def attribute_modules_impl(self, prepared: Prepared, ops):
        nodes: dict[str, str] = {}
        for g in prepared.info.get("_graphs", []):
            nodes.update(g)
        return attribution.attribute(ops, prepared.info.get("_calls", []), nodes)

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
