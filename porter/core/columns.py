"""The schema's two tables as plain numpy columns (name -> 1-D array): coerced, checked
and written to Parquet without pandas.

A reader builds its tables as columns; pandas, whose import costs ~0.45 s of CPU (more
than `porter ingest` of a 20k-event trace spends on all the rest), is loaded only when an
analysis needs a DataFrame (`to_frame`). The checks here are the schema's own: a DataFrame
is checked by turning it into columns (`porter.core.schema.validate`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from porter.core.checked import check_text_length
from porter.core.schema import (  # Table, from_frame and check_invariants live there: its validate uses them
    KERNEL_COLUMNS, OPS_COLUMNS, Column, SchemaViolation, Table, check_invariants, checked_numbers, dtype_of, from_frame,
    unknown_of,
)

if TYPE_CHECKING:
    import pandas as pd


def n_rows(table: Table) -> int:
    return len(next(iter(table.values()))) if table else 0


def to_frame(table: Table) -> "pd.DataFrame":
    """A DataFrame over the columns that keeps str columns as plain object arrays (pandas
    would otherwise infer its Arrow-backed str dtype, a copy per column)."""
    import pandas as pd

    return pd.DataFrame({
        k: pd.Series(v, dtype=object, copy=False) if v.dtype == object else v for k, v in table.items()
    }, copy=False)  # the columns are ours alone: no copy, no consolidation into 2D blocks


def _all_str(arr: np.ndarray) -> bool:
    if "pandas" in sys.modules:  # its C loop, when it is loaded anyway
        from pandas.api.types import infer_dtype

        return infer_dtype(arr, skipna=False) == "string"
    return set(map(type, arr.tolist())) <= {str}


def _as_str(arr: np.ndarray) -> np.ndarray:
    """Object array of str, '' for None and NaN; an all-str column passes untouched."""
    if arr.dtype == object and _all_str(arr):
        return arr
    values = arr.tolist()
    out = np.empty(len(values), dtype=object)
    out[:] = ["" if v is None or (isinstance(v, float) and v != v) else str(v) for v in values]
    return out


def coerce(table: Table, columns: tuple[Column, ...], name: str = "table") -> Table:
    """Exactly the schema's columns, in order, with its dtypes; optional columns a reader
    left out are filled with their unknown value. A trace value a numeric column cannot hold,
    or a text past the per-field limit, is FieldOutOfRange naming `name.column`."""
    n = n_rows(table)
    out: Table = {}
    for c in columns:
        if c.name not in table:
            if not c.optional:
                raise SchemaViolation(f"missing column {c.name!r}")
            out[c.name] = np.full(n, unknown_of(c.kind), dtype=dtype_of(c.kind))
            continue
        given = table[c.name]  # a list of str must not become a fixed-width '<U' array
        arr = np.asarray(given, dtype=object if c.kind == "str" and not isinstance(given, np.ndarray) else None)
        if c.kind == "str":
            out[c.name] = _as_str(arr)
            check_text_length(out[c.name], f"{name}.{c.name}")
        else:
            out[c.name] = arr if arr.dtype == dtype_of(c.kind) else checked_numbers(arr, c, name)
    return out


def coerce_ops(table: Table) -> Table:
    return coerce(table, OPS_COLUMNS, "ops")


def coerce_kernels(table: Table) -> Table:
    return coerce(table, KERNEL_COLUMNS, "kernels")


_KIND_OF = {"str": "OUS", "int": "iu", "float": "f", "bool": "b"}


def check_kinds(table: Table, columns: tuple[Column, ...], name: str) -> None:
    names = [c.name for c in columns]
    if list(table) != names:
        raise SchemaViolation(f"{name}: columns {list(table)} != schema {names}")
    for c in columns:
        if table[c.name].dtype.kind not in _KIND_OF[c.kind]:
            raise SchemaViolation(f"{name}.{c.name}: dtype {table[c.name].dtype} is not {c.kind}")


def validate(ops: Table, kernels: Table) -> None:
    """Check both tables against the schema and the invariants that tie them together."""
    check_kinds(ops, OPS_COLUMNS, "ops")
    check_kinds(kernels, KERNEL_COLUMNS, "kernels")
    check_invariants(ops, kernels)


def write_parquet(table: Table, columns: tuple[Column, ...], path: Path) -> None:
    """One coerced table as Parquet, typed as the schema says: what pandas' to_parquet wrote
    (NaN stored as null), without its index metadata (the tables have none)."""
    write_table(_arrow_table(table, columns), path)


def parquet_bytes(table: Table, columns: tuple[Column, ...]) -> bytes:
    """write_parquet's file, in memory (the same bytes)."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    write_table(_arrow_table(table, columns), sink)
    return sink.getvalue().to_pybytes()


def _arrow_table(table: Table, columns: tuple[Column, ...]) -> Any:
    import pyarrow as pa

    arrays = [_arrow(np.asarray(table[c.name]), c.kind) for c in columns]
    return pa.Table.from_arrays(arrays, names=[c.name for c in columns])


# pyarrow.parquet.write_table's defaults, spelt out for the writer underneath it
PARQUET_OPTIONS = {"version": "2.6", "use_dictionary": True, "compression": "snappy", "write_statistics": True,
                   "use_deprecated_int96_timestamps": False, "data_page_version": "1.0",
                   "use_compliant_nested_type": True, "store_schema": True, "writer_engine_version": "V2"}


def write_table(table: Any, path: Path | Any) -> None:
    """An Arrow table as a Parquet file through pyarrow's compiled writer: pyarrow.parquet's
    Python layer imports pyarrow.dataset and the file systems (~0.014 s, a twentieth of a
    small `porter ingest`). Same options, so the same bytes as pq.write_table (checked in
    tests/core/test_columns.py); pq.write_table itself when that writer is not there."""
    try:
        from pyarrow._parquet import ParquetWriter
        writer = ParquetWriter(str(path) if isinstance(path, Path) else path, table.schema, **PARQUET_OPTIONS)
    except (ImportError, TypeError):  # another pyarrow: its public writer
        import pyarrow.parquet as pq

        pq.write_table(table, path)
        return
    try:
        writer.write_table(table)
    finally:
        writer.close()


def _bits(mask: np.ndarray) -> Any:
    import pyarrow as pa

    return pa.py_buffer(np.packbits(mask, bitorder="little"))


def _arrow(arr: np.ndarray, kind: str) -> Any:
    """A coerced column as an Arrow array, built from its buffers: `pyarrow.array` imports
    pandas on every call, even for a numpy array (~0.45 s)."""
    import pyarrow as pa

    n = len(arr)
    if kind == "bool":
        return pa.Array.from_buffers(pa.bool_(), n, [None, _bits(arr)])
    if kind == "int":
        return pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(np.ascontiguousarray(arr))])
    if kind == "float":
        nan = np.isnan(arr)
        valid = _bits(~nan) if nan.any() else None
        return pa.Array.from_buffers(pa.float64(), n, [valid, pa.py_buffer(np.ascontiguousarray(arr))],
                                     null_count=int(nan.sum()))
    if "pandas" in sys.modules:  # loaded anyway (a diagnosis, a big trace): its C conversion, no joined copy
        return pa.array(arr, type=pa.string())
    # str: one UTF-8 buffer and the rows' offsets into it (an ASCII column in one C call)
    values = arr.tolist()
    text = "".join(values)
    if text.isascii():
        blob, lengths = text.encode("ascii"), map(len, values)
    else:
        encoded = [v.encode("utf-8", "surrogatepass") for v in values]
        blob, lengths = b"".join(encoded), map(len, encoded)
    if len(blob) >= 2**31:  # past 32-bit offsets: pyarrow's own conversion (it loads pandas)
        return pa.array(values, type=pa.string())
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.fromiter(lengths, dtype=np.int64, count=n), out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(blob)])


def as_columns(table: Any) -> Table:
    """A numpy table as is, a DataFrame as its columns."""
    return table if isinstance(table, dict) else from_frame(table)
