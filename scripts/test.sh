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
# --durations: the slowest tests named in every run, so a CI run near its 30 minutes says where they went.
# With arguments: those tests, one at a time. Without: the tests that do not read measured time
# on every core (pytest-xdist, a file per worker so module fixtures are built once), then the
# timing tests alone (tests/conftest.py TIMING_FILES), so no other test is their busy loop.
PYTEST=("$VENV/bin/python" -m pytest -q -p no:cacheprovider --durations=25)
if [ "$#" -gt 0 ]; then
  exec "${PYTEST[@]}" "$@"
fi
parallel=0 timing=0  # both phases run whatever the first finds, so one run names every failure
"${PYTEST[@]}" -m "not timing" -n "${PORTER_TEST_WORKERS:-auto}" --dist loadfile || parallel=$?
"${PYTEST[@]}" -m timing || timing=$?
if [ "$parallel" != 0 ] || [ "$timing" != 0 ]; then
  echo "tests failed: parallel phase exit $parallel, timing phase exit $timing" >&2
  exit 1
fi
