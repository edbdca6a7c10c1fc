"""The pandas-free table path (porter.core.columns, porter.core.factorize): the Parquet it writes is what
pandas' to_parquet wrote, its checks refuse what the DataFrame checks refuse, and the codes
match pandas.factorize."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from porter.core import columns
from porter.cli.process import runs_no_model
from porter.core.factorize import _numbers, _objects, factorize
from porter.core.schema import KERNEL_COLUMNS, OPS_COLUMNS, SchemaViolation, coerce_ops
from profilers.detect import read_trace
from tests.conftest import FIXTURES
from tests.core.test_foundation import make_tables


def _tables(ops: pd.DataFrame, kernels: pd.DataFrame) -> tuple[columns.Table, columns.Table]:
    return columns.from_frame(ops), columns.from_frame(kernels)


@pytest.mark.parametrize("pandas_loaded", [True, False])
def test_parquet_equals_pandas_to_parquet(tmp_path, monkeypatch, pandas_loaded: bool) -> None:
    """Same Arrow table as pandas wrote from the coerced frame (the old write_tables): types,
    values, NaN as null, non-ASCII text and an all-NaN column; only pandas' metadata is gone.
    Both ways of building str columns: pyarrow's (pandas loaded) and from buffers (not)."""
    ops, kernels = make_tables([2.0, 3.0, 0.5], [2.5, 3.0, 0.0])
    ops = coerce_ops(ops.assign(name=["aten::mm", "größe·op", ""], flops=[1e9, np.nan, 2.0]))
    tables = {name: columns.coerce(columns.from_frame(frame), cols)
              for frame, cols, name in ((ops, OPS_COLUMNS, "ops"), (kernels, KERNEL_COLUMNS, "kernels"))}
    if not pandas_loaded:
        monkeypatch.delitem(sys.modules, "pandas")  # what columns checks; the module stays imported
    for cols, name in ((OPS_COLUMNS, "ops"), (KERNEL_COLUMNS, "kernels")):
        columns.write_parquet(tables[name], cols, tmp_path / f"{name}.parquet")
    monkeypatch.undo()
    for frame, cols, name in ((ops, OPS_COLUMNS, "ops"), (kernels, KERNEL_COLUMNS, "kernels")):
        frame.to_parquet(tmp_path / f"{name}_pd.parquet", index=False)
        theirs = pq.read_table(tmp_path / f"{name}_pd.parquet").replace_schema_metadata(None)
        ours = pq.read_table(tmp_path / f"{name}.parquet")
        assert ours.schema.equals(theirs.schema) and ours.equals(theirs), name
    assert pq.read_table(tmp_path / "ops.parquet").column("flops").null_count == 1
    assert pq.read_table(tmp_path / "ops.parquet").column("bytes").null_count == 3


def test_parquet_bytes_equal_pyarrow_parquet_write_table(tmp_path) -> None:
    """porter.core.columns.write_table (pyarrow's compiled writer, without pyarrow.parquet's Python
    layer) writes the very bytes pq.write_table writes, for a real trace's two tables."""
    import pyarrow as pa

    result = read_trace(FIXTURES / "cpu_mlp.json.gz")
    for table, cols in ((result.ops_table, OPS_COLUMNS), (result.kernels_table, KERNEL_COLUMNS)):
        arrow = pa.Table.from_arrays([columns._arrow(np.asarray(table[c.name]), c.kind) for c in cols],
                                     names=[c.name for c in cols])
        columns.write_table(arrow, tmp_path / "ours.parquet")
        pq.write_table(arrow, tmp_path / "theirs.parquet")
        assert (tmp_path / "ours.parquet").read_bytes() == (tmp_path / "theirs.parquet").read_bytes()


def test_read_trace_gives_columns_that_make_the_same_frames() -> None:
    """A Kineto read keeps numpy columns; its DataFrames equal the columns, str as objects."""
    result = read_trace(FIXTURES / "cpu_mlp.json.gz")
    ops = result.ops_table
    assert isinstance(ops, dict) and list(ops) == [c.name for c in OPS_COLUMNS]
    assert ops["name"].dtype == object and ops["device_us"].dtype == np.float64
    frame = result.ops
    assert frame["name"].dtype == object
    assert frame["name"].tolist() == ops["name"].tolist()
    np.testing.assert_array_equal(frame["device_us"].to_numpy(), ops["device_us"])


def test_numpy_checks_refuse_what_the_frame_checks_refuse() -> None:
    ops, kernels = _tables(*make_tables([2.0, 3.0], [2.0, 3.0]))
    columns.validate(ops, kernels)
    with pytest.raises(SchemaViolation, match="does not equal"):
        columns.validate(ops | {"device_us": np.array([2.0, 4.0])}, kernels)
    with pytest.raises(SchemaViolation, match="unknown classes"):
        columns.validate(ops | {"op_class": np.array(["matmul", "gemmish"], dtype=object)}, kernels)
    with pytest.raises(SchemaViolation, match="name no op"):
        columns.validate(ops, kernels | {"op_id": np.array([0, 99])})
    with pytest.raises(SchemaViolation, match="not unique"):
        columns.validate(ops | {"op_id": np.array([1, 1])}, kernels | {"op_id": np.array([1, 1])})
    with pytest.raises(SchemaViolation, match="is not int"):
        columns.validate(ops | {"step": np.array(["a", "b"], dtype=object)}, kernels)
    with pytest.raises(SchemaViolation, match="missing column 'name'"):
        columns.coerce_ops({k: v for k, v in ops.items() if k != "name"})


def test_coerce_fills_optional_columns_and_makes_text_str() -> None:
    ops, _ = _tables(*make_tables([1.0], [1.0]))
    raw = {k: v for k, v in ops.items() if k not in ("members", "call")}
    raw["module"] = np.array([None], dtype=object)
    raw["kernels"] = np.array([7], dtype=object)
    out = columns.coerce_ops(raw)
    assert list(out) == [c.name for c in OPS_COLUMNS]
    assert out["members"].tolist() == [""] and out["call"].tolist() == [""]
    assert out["module"].tolist() == [""] and out["kernels"].tolist() == ["7"]


@pytest.mark.parametrize("values", [
    ["b", None, "a", "b", float("nan"), "a", None, "c"],
    [3, 1, 3, 2, 1],
    [2.5, float("nan"), 2.5, -1.0],
    ["only"],
    [],
])
def test_factorize_matches_pandas(values: list) -> None:
    arr = np.array(values, dtype=object if any(isinstance(v, str) or v is None for v in values) else None)
    want_codes, want_uniques = pd.factorize(arr)
    # the dict (or numpy) path, which a process without pandas takes, and the public entry
    for codes, uniques in ((_objects if arr.dtype == object else _numbers)(arr), factorize(arr)):
        assert codes.tolist() == want_codes.tolist()
        assert [str(u) for u in uniques] == [str(u) for u in want_uniques]


def test_trace_commands_are_told_from_model_runs(tmp_path) -> None:
    """One OpenBLAS thread only where no model runs (porter/cli/process.py one_blas_thread)."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text("{}")
    b.write_text("{}")
    assert runs_no_model(["ingest", str(a)]) and runs_no_model(["--debug", "show", str(a)])
    assert runs_no_model(["diagnose", "--from", str(a), f"--to={b}", "-o", "x"])
    assert not runs_no_model(["diagnose", "--from", "cpu", "--to", "xla"])
    assert not runs_no_model(["diagnose", "transformer", "--from", str(a), "--to", "xla"])
    assert not runs_no_model(["capture", "transformer", "--on", "cpu"])
    assert not runs_no_model([])
