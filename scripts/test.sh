#!/usr/bin/env bash
# The README's test command: a fresh virtual environment, the CPU dependency set, the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .venv
python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -c constraints/cpu.txt -e '.[test]'
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
.venv/bin/lint-imports --no-cache
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
