"""Propagated error, from the sketches each bundle keeps of every module's output (exact
norms, max |x|, NaN/Inf counts, elements at fixed-seed positions that correspond on both
sides, porter.targets.sketch), the model output compared in full; and the optional fp64
oracle, the model in float64 eager on the CPU, sketched at the same positions.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from porter.accuracy.local import NOT_CALLED, OUTPUT
from porter.analysis.accuracy import ErrorMetrics, Sketches, compare_sketches, error_metrics, oracle_verdict
from porter.bundles.bundle import ACTIVATIONS, Bundle
from porter.capture.options import OUTPUT_KEY
from porter.targets.base import first_float_tensor, module_hooks
from porter.targets.sketch import torch_sketch


@dataclass
class Propagated:
    """Each module's propagated error (the frame compare_sketches gives, the model output's
    row in full when both sides saved it), and the modules left out, with why."""

    frame: pd.DataFrame
    not_compared: dict[str, str]
    not_called: dict[str, str]  # containers and unused modules: nothing ran
    outputs: tuple[torch.Tensor | None, torch.Tensor | None]  # each side's full model output
    whole: ErrorMetrics | None  # the model output's error, when both shapes agree
    native: bool  # the target's module outputs are its own numerics (not eager stand-ins)


def propagated(source: Bundle, target: Bundle, src_sk: Sketches, tgt_sk: Sketches) -> Propagated:
    """The two bundles' sketches compared module by module; a target that saved eager module
    outputs keeps only its model output's error (its modules' are not its own)."""
    prop, not_compared = compare_sketches(src_sk, tgt_sk)
    for side, b in (("source", source), ("target", target)):
        for m, why in ((b.manifest.get("activations") or {}).get("not_recorded") or {}).items():
            not_compared.setdefault(m, f"{side}: {why}")
    not_called = {m: why for m, why in not_compared.items() if NOT_CALLED in why}
    not_compared = {m: why for m, why in not_compared.items() if m not in not_called}
    outputs = (full_output(source), full_output(target))
    whole = None
    if outputs[0] is not None and outputs[1] is not None and outputs[0].shape == outputs[1].shape:
        whole = error_metrics(outputs[0], outputs[1])
        prop = pd.concat([prop, pd.DataFrame([{"module": OUTPUT, "propagated_rel_l2": whole.rel_l2, "propagated_rel_l2_se": 0.0,
                                               "sampled": int(outputs[0].numel()), "numel": int(outputs[0].numel())}])],
                         ignore_index=True)
    native = (target.manifest.get("activations") or {}).get("native_module_outputs", True)
    if not native and len(prop):  # the target saved eager module outputs: only its model output is its own
        inner = prop["module"] != OUTPUT
        prop.loc[inner, ["propagated_rel_l2", "propagated_rel_l2_se"]] = math.nan
    return Propagated(prop, not_compared, not_called, outputs, whole, native)


def full_output(b: Bundle) -> torch.Tensor | None:
    """The model output a bundle saved whole (None when it saved none)."""
    from safetensors.torch import load_file

    f = b.path / ACTIVATIONS / "outputs.safetensors"
    return load_file(str(f)).get(OUTPUT_KEY) if f.is_file() else None


def fp64_sketches(model: Any) -> tuple[dict[str, np.ndarray], torch.Tensor | None]:
    """Sampled outputs of every module (same positions as the bundles' sketches) and the full
    model output of a float64 eager CPU run on the same inputs."""
    ref = copy.deepcopy(model.module).to("cpu").double().eval()
    samples: dict[str, np.ndarray] = {}

    def keep(path: str, args: Any, kwargs: Any, output: Any) -> None:
        t = first_float_tensor(output)
        if t is not None and path not in samples:
            samples[path] = torch_sketch(t)[1]

    inputs = tuple(x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in model.example_inputs)
    with torch.no_grad(), module_hooks(ref, on_call=keep):
        final = first_float_tensor(ref(*inputs))
    return samples, final


def oracle_columns(df: pd.DataFrame, src: Sketches, tgt: Sketches, outputs: tuple[Any, Any], model: Any,
                   dtype: str) -> tuple[pd.DataFrame, dict[str, Any] | None]:
    """df with each module's oracle columns, and the verdict at the model output (None without one)."""
    ref_samples, ref_out = fp64_sketches(model)
    cols: dict[str, list[Any]] = {"oracle_source_error": [], "oracle_target_error": [], "oracle_bound": [], "oracle_passed": []}
    overall = None
    for module in df["module"]:
        v = None
        if module == OUTPUT and ref_out is not None and outputs[0] is not None and outputs[1] is not None:
            v = oracle_verdict(outputs[0], outputs[1], ref_out, dtype=dtype)
        elif module in ref_samples and module in src.samples and module in tgt.samples:
            v = oracle_verdict(src.samples[module], tgt.samples[module], ref_samples[module], dtype=dtype)
        cols["oracle_source_error"].append(v.source_error if v else math.nan)
        cols["oracle_target_error"].append(v.target_error if v else math.nan)
        cols["oracle_bound"].append(v.bound if v else math.nan)
        cols["oracle_passed"].append(v.passed if v else None)
        if v and module == OUTPUT:
            overall = {"passed": v.passed, "target_error": v.target_error, "source_error": v.source_error,
                       "bound": v.bound, "multiplier": v.multiplier, "reference": "the model in float64, eager on the CPU",
                       "rule": "err(target, fp64) <= multiplier * err(source, fp64) + tolerance / 10 (relative L2; "
                               "per module over the sketches' sampled elements, at the output over every element)"}
    return df.assign(**cols), overall
