"""A regular (non-editable) install renders reports from outside the checkout.

Installs the project with pip into a scratch folder (no dependencies: the test venv has
them), then runs `porter diagnose` of a recorded pair from a directory outside the repo,
so the templates and data files must come from the installed package, not the tree.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from conftest import FIXTURES, REPO


@pytest.mark.slow
def test_non_editable_install_diagnoses_and_renders(tmp_path):
    site, src = tmp_path / "site", tmp_path / "src"  # a copy: setuptools builds in the source tree
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".venv", ".venv-*", ".git", "build", "*.egg-info", "__pycache__"))
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                          "--disable-pip-version-check", "--target", str(site), str(src)],
                         capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr
    assert (site / "reports" / "templates" / "report.html.j2").is_file()
    assert (site / "porter" / "data" / "fixes.toml").is_file()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = dict(os.environ, PYTHONPATH=str(site))
    where = subprocess.run([sys.executable, "-c", "import porter, reports; print(porter.__file__); print(reports.__file__)"],
                           cwd=elsewhere, env=env, capture_output=True, text=True)
    assert all(line.startswith(str(site)) for line in where.stdout.split()), where.stdout
    trace = FIXTURES / "cpu_mlp.json.gz"
    run = subprocess.run([sys.executable, "-m", "porter", "diagnose", "--from", str(trace), "--to", str(trace),
                          "-o", "out"], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    html = (elsewhere / "out" / "report.html").read_text()
    assert "<svg" in html and "cpu_mlp" in html
    assert (elsewhere / "out" / "report.md").read_text().startswith("#")
