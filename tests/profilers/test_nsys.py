"""Nsight Systems SQLite reader, on the corpus's three exports (nsys 2022.2 and 2026.2 schemas)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from conftest import corpus_files, db_value, run_porter
from porter.core.errors import TraceFormatError
from profilers import nsys
from profilers.base import read_head
from profilers.detect import detect, read_trace

FILES = corpus_files("nsys", "*.sqlite")
pytestmark = pytest.mark.skipif(not FILES, reason="trace corpus not found (set PORTER_TRACE_CORPUS)")



@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_kernel_time_equals_the_databases_own_sum(path: Path) -> None:
    """Total kernel time is the database's sum(end - start) within 0.5%; copies and sets too."""
    assert detect(path) == "nsys" and nsys.sniff(path, read_head(path))
    got = read_trace(path)
    k = got.kernels
    expected = db_value(path, "SELECT sum(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL") / 1e3
    assert k.loc[k.kind == "kernel", "dur_us"].sum() == pytest.approx(expected, rel=5e-3)
    assert (k.kind == "kernel").sum() == db_value(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    copies = db_value(path, "SELECT sum(end - start) FROM CUPTI_ACTIVITY_KIND_MEMCPY") / 1e3
    assert k.loc[k.kind == "memcpy", "dur_us"].sum() == pytest.approx(copies, rel=5e-3)
    assert got.ops["device_us"].sum() == pytest.approx(k["dur_us"].sum(), rel=1e-9)


def test_old_schema_links_launches_and_names_the_gpu(corpus: Path) -> None:
    """nsys 2022.2: each saxpy kernel is launched by its cudaLaunchKernel (outer of the _v7000
    pair) inside the user's `saxpy` NVTX range, which becomes its module; TARGET_INFO_GPU names it."""
    got = read_trace(corpus / "nsys/a100_saxpy_mpi_cuda.sqlite")
    assert got.meta.device_name == "NVIDIA A100-SXM4-40GB"
    assert got.meta.extra["nsys_version"].startswith("2022.2") and got.meta.extra["export_schema"] == "2.9.1"
    ops = got.ops
    saxpy = ops[ops.name.str.startswith("saxpy(")]
    assert len(saxpy) == 5 and set(saxpy.module) == {"saxpy"} and not saxpy.synthetic.any()
    assert (saxpy.host_us > 30).all()  # the outer cudaLaunchKernel lasts ~33 us, its inner call less
    mpi = ops[ops.name.str.startswith("MPI_")]
    assert set(mpi.name) == {"MPI_Init", "MPI_Send", "MPI_Recv", "MPI_Finalize"}
    assert set(ops["rank"]) == {-1}


def test_new_schema_two_processes_are_two_ranks_with_nvtx_ops_and_fsdp_modules(corpus: Path) -> None:
    """nsys 2026.2, two python processes on two H100s: a rank each; PyTorch's emit_nvtx ranges
    are the ops (annotations stripped), FSDP's forward markers the modules."""
    path = corpus / "nsys/h100x2_mfu_before.sqlite"
    got = read_trace(path)
    k, ops = got.kernels, got.ops
    assert set(k["rank"]) == {0, 1} and set(ops["rank"]) == {0, 1}
    assert k.groupby("rank").device_id.nunique().tolist() == [1, 1]
    per_rank = k[k.kind == "kernel"].groupby("rank").size().tolist()
    assert sorted(per_rank) == sorted(int(db_value(path, f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE deviceId = {d}"))
                                      for d in (0, 1))
    assert not ops.name.str.contains(", op_id = ").any()
    flash = ops[ops.name == "flash_attn::_flash_attn_forward"]
    assert (flash.device_us > 0).sum() >= 60 and set(flash.op_class) == {"attention"}  # the last is cut by the window
    blocks = {m for m in ops.module if m.startswith("blocks/")}
    assert len(blocks) >= 15 and "blocks/9/_checkpoint_wrapped_module" in blocks
    assert got.meta.extra["ranks_are"] == "process" and len(got.meta.extra["processes"]) == 2


def test_show_by_kernel_and_module_from_the_cli(corpus: Path, tmp_path: Path) -> None:
    r = run_porter("ingest", str(corpus / "nsys/h100x2_fastvideo_sp2_1s.sqlite"), "-o", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "nsys" in r.stdout and "4368 kernels" in r.stdout
    bundle = tmp_path / "h100x2_fastvideo_sp2_1s"
    by_module = run_porter("show", str(bundle), "--by", "module", "--top", "40")
    assert by_module.returncode == 0, by_module.stderr
    assert "encoder/block/0/layer/1" in by_module.stdout
    by_kernel = run_porter("show", str(bundle), "--by", "kernel")
    assert by_kernel.returncode == 0 and "Memcpy HtoD" in by_kernel.stdout


def test_a_report_file_gets_the_export_hint(tmp_path: Path) -> None:
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"\x00" * 64 + b"not sqlite")
    with pytest.raises(TraceFormatError, match="nsys export --type sqlite run.nsys-rep"):
        read_trace(rep)


def damaged_copy(source: Path, path: Path, sql: str) -> Path:
    """A writable copy of a corpus database with SQL statements (';'-separated) applied."""
    shutil.copy(source, path)
    path.chmod(0o644)
    with sqlite3.connect(path) as conn:
        conn.executescript(sql)
    return path


def test_a_missing_table_names_the_nsys_version(corpus: Path, tmp_path: Path) -> None:
    path = damaged_copy(corpus / "nsys/a100_saxpy_mpi_cuda.sqlite", tmp_path / "nokernels.sqlite",
                        "DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    r = run_porter("ingest", str(path), "-o", str(tmp_path / "out"))
    assert r.returncode == 2 and not (tmp_path / "out" / "nokernels").exists()
    line = r.stderr.strip()
    assert "\n" not in line and "Nsight Systems 2022.2.1.31 export (schema 2.9.1)" in line
    assert "CUPTI_ACTIVITY_KIND_KERNEL" in line


def test_text_where_a_time_belongs_is_one_line(corpus: Path, tmp_path: Path) -> None:
    path = damaged_copy(corpus / "nsys/h100x2_mfu_before.sqlite", tmp_path / "wrongtype.sqlite",
                        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'soon' WHERE rowid = 7")
    with pytest.raises(TraceFormatError, match="column start holds str value 'soon'"):
        read_trace(path)


def test_null_where_a_time_belongs_is_one_line(corpus: Path, tmp_path: Path) -> None:
    """Was a TypeError from the int64 range check (fuzz case 953: None <= int)."""
    path = damaged_copy(corpus / "nsys/h100x2_mfu_before.sqlite", tmp_path / "null.sqlite",
                        # the column is NOT NULL; a table copy (CREATE AS SELECT) drops that, as a damaged page would
                        "CREATE TABLE r AS SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME;"
                        "DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME; ALTER TABLE r RENAME TO CUPTI_ACTIVITY_KIND_RUNTIME;"
                        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = NULL WHERE rowid = 7")
    with pytest.raises(TraceFormatError, match="column CUPTI_ACTIVITY_KIND_RUNTIME.start holds NULL where an integer"):
        read_trace(path)


def test_sqlites_own_message_quoting_damaged_text_stays_one_line(corpus: Path, tmp_path: Path) -> None:
    """Was two lines (fuzz cases 6965 and 8422: sqlite3's decode error quoted an environment
    variable's shell function, newline and all)."""
    path = damaged_copy(corpus / "nsys/h100x2_mfu_before.sqlite", tmp_path / "badtext.sqlite",
                        "UPDATE StringIds SET value = CAST(X'ff0a0a' || hex(randomblob(200)) AS TEXT) WHERE id = "
                        "(SELECT min(id) FROM StringIds)")
    with pytest.raises(TraceFormatError) as caught:
        read_trace(path)
    line = str(caught.value)
    assert "\n" not in line and "badtext.sqlite" in line, line
    assert "damaged or unexpected database (Could not decode to UTF-8" in line and len(line) < 400
