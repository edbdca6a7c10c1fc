"""rocpd reader: the corpus's rocmProfileData .rpd, and a rocprofv3 rocpd database built from
the documented schema (fixtures/rocpd_v3.py: no recorded one exists in the corpus)."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, corpus_files, db_value, run_porter
from porter.core.errors import TraceFormatError
from profilers import rocpd
from profilers.base import read_head
from profilers.detect import detect, read_trace

sys.path.insert(0, str(FIXTURES))
import rocpd_v3  # noqa: E402

RPD = corpus_files("rocpd", "*.rpd")



@pytest.mark.skipif(not RPD, reason="trace corpus not found (set PORTER_TRACE_CORPUS)")
@pytest.mark.parametrize("path", RPD, ids=lambda p: p.name)
def test_rpd_kernel_time_equals_the_databases_own_sum(path: Path) -> None:
    assert detect(path) == "rocpd" and rocpd.sniff(path, read_head(path))
    got = read_trace(path)
    k = got.kernels
    kernel_type = "(SELECT id FROM rocpd_string WHERE string = 'KernelExecution')"
    expected = db_value(path, f"SELECT sum(end - start) FROM rocpd_op WHERE opType_id IN {kernel_type}") / 1e3
    assert k.loc[k.kind == "kernel", "dur_us"].sum() == pytest.approx(expected, rel=5e-3)
    assert (k.kind == "kernel").sum() == db_value(path, f"SELECT count(*) FROM rocpd_op WHERE opType_id IN {kernel_type}")
    assert len(k) == db_value(path, "SELECT count(*) FROM rocpd_op")


@pytest.mark.skipif(not RPD, reason="trace corpus not found (set PORTER_TRACE_CORPUS)")
def test_rpd_kernels_start_at_their_hip_launch(corpus: Path) -> None:
    """Every op of the matmul run has its HIP call (rocpd_api_ops); the Tensile GEMM is a matmul
    whose op starts at its hipExtModuleLaunchKernel, before the kernel itself."""
    path = corpus / "rocpd/gfx90a_pytorch_matmul.rpd"
    got = read_trace(path)
    ops, k = got.ops, got.kernels
    assert not ops.synthetic.any() and got.meta.extra["generation"] == "rpd"
    gemm = ops[ops.name.str.startswith("Cijk_")]
    assert len(gemm) == 1 and gemm.op_class.iloc[0] == "matmul"
    launch_ns = db_value(path, "SELECT a.start FROM rocpd_api a JOIN rocpd_string s ON s.id = a.apiName_id "
                           "WHERE s.string = 'hipExtModuleLaunchKernel'")
    t0 = db_value(path, "SELECT min(start) FROM (SELECT start FROM rocpd_op UNION ALL SELECT a.start FROM rocpd_api a "
                    "JOIN rocpd_api_ops l ON l.api_id = a.id)")
    assert gemm.start_us.iloc[0] == pytest.approx((launch_ns - t0) / 1e3, abs=1e-3)
    assert gemm.start_us.iloc[0] < k.loc[gemm.index[0], "start_us"]
    assert set(ops.loc[k.kind == "memcpy", "op_class"]) == {"copy"}


@pytest.fixture()
def v3_db(tmp_path: Path) -> Path:
    return rocpd_v3.build(tmp_path / "rocprofv3_run.db")


def test_rocprofv3_rocpd_database_from_the_documented_schema(v3_db: Path) -> None:
    """Dispatches and the copy are linked to their hip* call by stack id; the untraced one is
    synthetic; names from rocpd_info_kernel_symbol.display_name; the GPU from rocpd_info_agent."""
    assert detect(v3_db) == "rocpd"
    got = read_trace(v3_db)
    ops, k = got.ops, got.kernels
    assert got.meta.extra["generation"] == "rocprofv3" and got.meta.device_name == "AMD Instinct MI300X"
    table = f"rocpd_kernel_dispatch{rocpd_v3.UUID}"
    expected = db_value(v3_db, f'SELECT sum("end" - start) FROM "{table}"') / 1e3
    assert k.loc[k.kind == "kernel", "dur_us"].sum() == pytest.approx(expected, rel=1e-9)
    assert ops.synthetic.tolist() == [False, False, False, True, False]
    assert ops.host_us.tolist()[:3] == pytest.approx([6.0, 4.0, 5.5])
    assert set(ops.name) >= {"Cijk_Alik_Bljk_HHS_BH_MT128x128x32", "MEMORY_COPY_HOST_TO_DEVICE"}
    assert ops.op_class.tolist() == ["matmul", "elementwise", "matmul", "elementwise", "copy"]
    assert ops.loc[k.kind == "memcpy", "bytes"].tolist() == [8 << 20]


def test_rocprofv3_database_ingests_from_the_cli(v3_db: Path, tmp_path: Path) -> None:
    r = run_porter("ingest", str(v3_db), "-o", str(tmp_path / "b"))
    assert r.returncode == 0, r.stderr
    assert "rocpd, AMD Instinct MI300X: 5 ops, 5 kernels" in r.stdout
    shown = run_porter("show", str(tmp_path / "b" / "rocprofv3_run.db"), "--by", "class")
    assert shown.returncode == 0 and "matmul" in shown.stdout


def test_missing_symbol_table_is_one_line(v3_db: Path) -> None:
    with sqlite3.connect(v3_db) as conn:
        conn.execute('DROP VIEW "rocpd_info_kernel_symbol"')
        conn.execute(f'DROP TABLE "rocpd_info_kernel_symbol{rocpd_v3.UUID}"')
    with pytest.raises(TraceFormatError, match="rocprofv3 rocpd database: has no rocpd_info_kernel_symbol table"):
        read_trace(v3_db)


@pytest.mark.skipif(not RPD, reason="trace corpus not found (set PORTER_TRACE_CORPUS)")
def test_text_where_an_api_time_belongs_is_one_line(tmp_path: Path) -> None:
    """Was numpy's ValueError (fuzz cases 5015, 8487: 'could not convert string to float')."""
    path = tmp_path / "damaged.rpd"
    path.write_bytes(RPD[0].read_bytes())
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE rocpd_api SET start = 'x' WHERE id IN (SELECT api_id FROM rocpd_api_ops LIMIT 1)")
    with pytest.raises(TraceFormatError, match="column API call start holds str value 'x' where an integer belongs"):
        read_trace(path)
