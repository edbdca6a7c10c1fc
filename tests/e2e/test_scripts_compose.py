"""The README's two commands share one environment: scripts/test.sh reuses the .venv that
scripts/demo.sh built while it is current (scripts/venv.sh's stamp), and rebuilds only when
what it was installed from changed; CI builds its own (.venv-ci), leaving .venv alone."""

from __future__ import annotations

import shutil
import subprocess
import sys

from conftest import REPO


def in_copy(tmp_path, script: str) -> subprocess.CompletedProcess:
    """script run by bash in a folder holding porter's install inputs and scripts/venv.sh."""
    for rel in ("pyproject.toml", "constraints/cpu.txt", "scripts/venv.sh"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, tmp_path / rel)
    return subprocess.run(["bash", "-c", f"set -euo pipefail; source scripts/venv.sh; {script}"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)


def fake_venv(tmp_path):
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    (tmp_path / ".venv" / "kept").write_text("installed by the demo")


def test_a_current_environment_is_reused_untouched(tmp_path):
    fake_venv(tmp_path)
    r = in_copy(tmp_path, "porter_stamp > .venv/.porter-stamp; porter_venv .venv; echo reused")
    assert r.returncode == 0 and r.stdout.strip() == "reused", r.stderr
    assert (tmp_path / ".venv" / "kept").read_text() == "installed by the demo"


def test_a_changed_pyproject_or_a_missing_stamp_makes_it_stale(tmp_path):
    fake_venv(tmp_path)
    r = in_copy(tmp_path, "porter_venv_current .venv && echo current || echo stale")
    assert r.stdout.strip() == "stale"  # no stamp: an install that never finished
    r = in_copy(tmp_path, "porter_stamp > .venv/.porter-stamp; echo '# edit' >> pyproject.toml; "
                          "porter_venv_current .venv && echo current || echo stale")
    assert r.stdout.strip() == "stale"


def test_the_scripts_never_delete_the_demo_environment_unasked():
    test_sh, demo_sh = (REPO / "scripts" / n for n in ("test.sh", "demo.sh"))
    for text in (test_sh.read_text(), demo_sh.read_text()):
        assert "rm -rf .venv" not in text and "source scripts/venv.sh" in text
    assert 'VENV=.venv-ci\n  porter_venv "$VENV" fresh' in test_sh.read_text()  # CI: a fresh one of its own
