#!/usr/bin/env bash
# The README's first command: set up on a fresh machine and run porter's main job on its
# built-in default.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/porter ] || { python3 -m venv .venv && .venv/bin/pip install -q --disable-pip-version-check -c constraints/cpu.txt -e '.[test]'; }
.venv/bin/porter show fixtures/cpu_mlp.json.gz --by module
