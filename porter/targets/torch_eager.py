"""torch eager on cpu/cuda/rocm/mps, profiled with torch.profiler (Kineto).

Module paths come from forward hooks that open ``porter.module:<path>`` ranges.
"""

from __future__ import annotations

from typing import Any, ContextManager

import torch

from porter.targets.base import Prepared, module_hooks, torch_range
from porter.targets.torch_common import TorchStack, tracked_first_run


class TorchEager(TorchStack):
    name = "eager"
    module_attribution = "hooks"
    activation_source = "forward hooks (same eager forward as measured)"

    def make_call(self, prepared: Prepared):
        module = prepared.handle

        def call(*inputs: Any) -> Any:
            with torch.no_grad():
                return module(*inputs)

        return call

    def first_run_impl(self, prepared: Prepared) -> Any:
        return tracked_first_run(self, prepared)

    def tagging(self, prepared: Prepared) -> ContextManager[Any]:
        return module_hooks(prepared.handle, scope=torch_range)


STACK = TorchEager()
