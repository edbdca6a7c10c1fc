"""Schema validation, op classes and atomic bundle writes."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from porter.bundles.bundle import base_manifest, load_bundle, staging, write_manifest, write_tables
from porter.core.errors import BundleError
from porter.core.opclass import classify, classify_kernel, classify_op
from porter.core.schema import (
    OP_CLASSES,
    OPS_COLUMNS,
    SCHEMA_VERSION,
    SchemaViolation,
    coerce_kernels,
    coerce_ops,
    validate,
)


def make_tables(kernel_durs: list[float], attributed: list[float]) -> tuple[pd.DataFrame, pd.DataFrame]:
    n = len(attributed)
    ops = pd.DataFrame({
        "op_id": np.arange(n), "parent_id": -1, "step": 0, "name": [f"aten::op{i}" for i in range(n)],
        "framework_op": "aten::mm", "op_class": "matmul", "module": "blk", "device_type": "cuda",
        "device_name": "X", "stream": 7, "start_us": np.arange(n, dtype=float), "host_us": 1.0,
        "device_us": attributed, "kernel_count": 1, "kernels": "k", "flops": np.nan, "bytes": np.nan,
        "input_shapes": "", "dtypes": "", "synthetic": False,
    })
    kernels = pd.DataFrame({
        "op_id": np.arange(len(kernel_durs)) % max(n, 1), "step": 0, "name": "k", "kind": "kernel",
        "device_id": 0, "stream": 7, "start_us": 0.0, "dur_us": kernel_durs, "correlation": -1,
    })
    return coerce_ops(ops), coerce_kernels(kernels)


def test_validate_accepts_consistent_tables():
    ops, kernels = make_tables([2.0, 3.0], [2.0, 3.0])
    validate(ops, kernels)
    assert [c.name for c in OPS_COLUMNS] == list(ops.columns)


def test_validate_rejects_time_that_does_not_add_up():
    ops, kernels = make_tables([2.0, 3.0], [2.0, 4.0])
    with pytest.raises(SchemaViolation, match="device_us"):
        validate(ops, kernels)


def test_validate_rejects_unknown_class_and_orphan_kernels():
    ops, kernels = make_tables([1.0], [1.0])
    with pytest.raises(SchemaViolation, match="unknown classes"):
        validate(ops.assign(op_class="gemmish"), kernels)
    with pytest.raises(SchemaViolation, match="name no op"):
        validate(ops, kernels.assign(op_id=99))


@pytest.mark.parametrize("name,cls", [
    ("aten::addmm", "matmul"), ("aten::linear", "matmul"), ("aten::cudnn_convolution", "conv"),
    ("aten::miopen_convolution", "conv"), ("aten::native_layer_norm", "norm"), ("aten::_softmax", "softmax"),
    ("aten::_scaled_dot_product_flash_attention", "attention"), ("aten::embedding", "embedding"),
    ("aten::gelu", "elementwise"), ("aten::sum", "reduction"), ("aten::copy_", "copy"), ("dot_general", "matmul"),
])
def test_framework_op_classes(name, cls):
    assert classify_op(name) == cls


@pytest.mark.parametrize("kernel,cls", [
    ("Cijk_Alik_Bljk_BBS_BH_MT128x128x64_MI16x16x1", "matmul"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "matmul"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::BFloat16>", "softmax"),
    ("Memcpy HtoD (Pageable -> Device)", "copy"),
    ("Memset (Device)", "memset"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "collective"),
    ("triton_poi_fused_add_mul_0", "elementwise"),
])
def test_kernel_classes(kernel, cls):
    assert classify_kernel(kernel) == cls


def test_classify_falls_back_to_kernels_by_majority():
    assert classify("aten::unknown_custom_thing", ["Cijk_x", "Cijk_y", "triton_poi_z"]) == "matmul"
    assert set(OP_CLASSES) >= {"matmul", "other"}


def write_bundle(dest, durs):
    ops, kernels = make_tables(durs, durs)
    with staging(dest) as tmp:
        write_tables(tmp, ops, kernels)
        write_manifest(tmp, base_manifest(label="t"))


def test_bundle_roundtrip_and_atomic_replace(tmp_path):
    dest = tmp_path / "b"
    write_bundle(dest, [1.0, 2.0])
    assert load_bundle(dest).kernels["dur_us"].sum() == 3.0

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with staging(dest) as tmp:
            (tmp / "ops.parquet").write_bytes(b"half-written")
            raise Boom
    # the old bundle survives a failed rewrite, and no temporary directory is left behind
    assert load_bundle(dest).kernels["dur_us"].sum() == 3.0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]


def test_bundle_of_another_schema_version_is_refused(tmp_path):
    dest = tmp_path / "b"
    write_bundle(dest, [1.0])
    manifest = json.loads((dest / "manifest.json").read_text())
    manifest["schema_version"] = SCHEMA_VERSION + 1
    (dest / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="schema version"):
        load_bundle(dest)
