"""Every command imports only what it uses: trace-mode commands never load torch, jax, torchax
or onnxruntime (each costs seconds), `--help` loads neither rich nor pandas, and `report` reads
diagnosis.json without pandas or pyarrow. Each case runs the real CLI in a fresh interpreter
and reads `sys.modules` as the command exits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, REPO

ML_STACKS = {"torch", "jax", "jaxlib", "torchax", "onnxruntime", "tensorflow"}
TABLES = {"pandas", "pyarrow"}
PHASES = ("read", "accuracy", "align", "attribute", "cost", "rank", "write", "render")

HARNESS = """
import json, sys
sys.argv = ["porter", *json.loads(sys.argv[1])]
from porter.cli.app import main
code = 0
try:
    main()
except SystemExit as exc:
    code = exc.code or 0
sys.stdout.flush()
import gc
print("\\nMODULES " + json.dumps({"code": code, "gc": gc.isenabled(), "modules": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def loaded_by(*args: str | Path, stderr: list[str] | None = None) -> set[str]:
    """Top-level packages in sys.modules after `porter ARGS` ran in a fresh interpreter
    (its stderr appended to `stderr` when given)."""
    env = dict(os.environ, COLUMNS="120")
    proc = subprocess.run([sys.executable, "-c", HARNESS, json.dumps([str(a) for a in args])],
                          cwd=REPO, capture_output=True, text=True, env=env, timeout=300)
    line = proc.stdout.rsplit("MODULES ", 1)[-1]
    result = json.loads(line)
    assert result["code"] == 0, proc.stdout + proc.stderr
    if args[0] != "--help":  # main() holds the collector off for the imports; every command turns it back on
        assert result["gc"], args
    if stderr is not None:
        stderr.append(proc.stderr)
    return set(result["modules"])


def test_help_loads_no_rich_and_no_tables() -> None:
    mods = loaded_by("--help")
    assert "typer" in mods  # the harness really ran the CLI
    assert not mods & (ML_STACKS | TABLES | {"rich", "numpy", "markdown_it"})


def test_trace_commands_never_import_a_stack(tmp_path: Path) -> None:
    kineto, xplane = FIXTURES / "cpu_mlp.json.gz", FIXTURES / "xla_cpu_mlp.xplane.pb"
    mods = loaded_by("ingest", kineto, xplane, "-o", tmp_path / "bundles")
    assert "pyarrow" in mods and not mods & ML_STACKS, sorted(mods & ML_STACKS)
    assert "pydantic" not in mods  # list[Path] too (porter/cli/params.py)
    bundle = next((tmp_path / "bundles").iterdir())
    for target in (kineto, bundle):
        mods = loaded_by("show", target, "--by", "module")
        assert not mods & ML_STACKS, sorted(mods & ML_STACKS)
    diag = tmp_path / "diag"
    said: list[str] = []
    mods = loaded_by("diagnose", "--from", kineto, "--to", xplane, "-o", diag, stderr=said)
    # not a terminal: no bar, one plain line per stage, in order
    stages = [line.split(":")[1].strip() for line in said[0].splitlines() if line.startswith("porter: ")]
    assert [s.split()[0] for s in stages] == ["aligning", "writing", "writing"], said
    assert "\x1b" not in said[0]
    assert (diag / "diagnosis.json").is_file() and (diag / "report.html").is_file()
    assert not mods & ML_STACKS, sorted(mods & ML_STACKS)
    assert "pydantic" not in mods  # str/Path/int/float options coerced without typer's adapters (porter/cli/params.py)
    assert "rich" not in mods  # on a pipe every line is plain text: rich stays unimported
    seconds = json.loads((diag / "diagnosis.json").read_text())["seconds"]
    assert set(PHASES) <= set(seconds), seconds  # every phase timed, render included
    assert all(seconds[k] >= 0 for k in PHASES)
    assert sum(seconds[k] for k in PHASES) <= seconds["total"] * 1.001, seconds
    mods = loaded_by("report", diag, "--format", "all", "-o", tmp_path / "again")
    assert (tmp_path / "again" / "report.md").is_file()
    assert not mods & (ML_STACKS | TABLES), sorted(mods & (ML_STACKS | TABLES))


def test_kineto_ingest_loads_no_pandas(tmp_path: Path) -> None:
    """A Kineto trace becomes a bundle from numpy columns (porter/core/columns.py): pandas, ~0.45 s
    of CPU, stays out; the bundle still reads back into the schema's DataFrames."""
    from porter.bundles.bundle import load_bundle
    from profilers.detect import read_trace

    trace = FIXTURES / "cpu_mlp.json.gz"
    mods = loaded_by("ingest", trace, "-o", tmp_path / "bundles")
    assert "pyarrow" in mods and "pandas" not in mods, sorted(mods & TABLES)
    bundle = load_bundle(next((tmp_path / "bundles").iterdir()))
    expected = read_trace(trace)
    assert len(bundle.ops) == len(expected.ops) > 0
    assert bundle.ops["name"].tolist() == expected.ops["name"].tolist()
    assert bundle.kernels["dur_us"].sum() == pytest.approx(expected.kernels["dur_us"].sum(), rel=1e-12)


@pytest.mark.parametrize("module", ["porter.pipeline.diagnose", "porter.bundles.ingest", "porter.pipeline.inputs", "reports.build"])
def test_library_modules_import_no_stack(module: str) -> None:
    """The Python API a notebook imports for trace work is as light as the CLI."""
    code = f"import sys, {module}; print(sorted({{m.split('.')[0] for m in sys.modules}} & set({sorted(ML_STACKS)!r})))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_plain_options_still_refuse_bad_values(tmp_path: Path) -> None:
    """Coerced without pydantic (porter/cli/params.py), a bad number is still a usage error (exit 2)
    naming the option, and a good one still works."""
    for args, option, word in ((["show", FIXTURES / "cpu_mlp.json.gz", "--top", "abc"], "--top", "integer"),
                               (["ingest", FIXTURES / "cpu_mlp.json.gz", "-o", tmp_path, "--max-inflate", "zz"],
                                "--max-inflate", "number")):
        proc = subprocess.run([sys.executable, "-m", "porter", *map(str, args)], cwd=REPO, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert option in proc.stderr and f"is not a valid {word}" in proc.stderr, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "porter", "show", str(FIXTURES / "cpu_mlp.json.gz"), "--top", "2"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
