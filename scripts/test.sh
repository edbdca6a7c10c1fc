#!/usr/bin/env bash
# The README's test command: the CPU dependency set in .venv (the one scripts/demo.sh uses,
# reused while current: scripts/venv.sh), then the suite. In CI ($CI set, as .ci/run does) or with
# PORTER_FRESH_VENV=1 it builds a fresh environment of its own, .venv-ci, so a dependency missing
# from pyproject.toml fails there; .venv is never touched then.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
VENV=.venv
if [ -n "${CI:-}" ] || [ "${PORTER_FRESH_VENV:-}" = 1 ]; then
  VENV=.venv-ci
  porter_venv "$VENV" fresh
else
  porter_venv "$VENV"
fi
# The report tests open report.html in headless Chromium (tests/reports/test_report_browser.py): install
# it when missing and we may (root with apt-get); otherwise those tests fail, naming the fix,
# rather than skip, so this command either tests everything or says what is missing.
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
  fi
fi
export PORTER_REQUIRE_BROWSER=1
# The layer contracts (pyproject.toml [tool.importlinter]): a wrong import fails here.
"$VENV/bin/lint-imports" --no-cache
# --durations: the slowest tests named in every run, so a CI run near its 30 minutes says where they went
"$VENV/bin/python" -m pytest -q -p no:cacheprovider --durations=25 "$@"
