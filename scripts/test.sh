#!/usr/bin/env bash
# The README's test command: a fresh virtual environment, the CPU dependency set, the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .venv
python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -c constraints/cpu.txt -e '.[test]'
# The layer contracts (pyproject.toml [tool.importlinter]): a wrong import fails here.
.venv/bin/lint-imports --no-cache
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
