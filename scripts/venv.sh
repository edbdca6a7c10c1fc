#!/usr/bin/env bash
# Sourced by scripts/demo.sh and scripts/test.sh: porter's environment in a folder, built once
# and reused while it is current. "Current" is a stamp of what the install was made from
# (pyproject.toml, constraints/cpu.txt, the python3 it runs on), written after the install
# succeeds; a changed file or an interrupted install rebuilds it. So the demo and the tests
# share one environment: neither deletes the one the other just built.

porter_stamp() {
  { cat pyproject.toml constraints/cpu.txt; python3 --version; } | sha256sum | cut -d' ' -f1
}

# porter_venv_current DIR: whether DIR was installed from today's files (status 0) or not.
porter_venv_current() {
  [ -x "$1/bin/python" ] && [ "$(cat "$1/.porter-stamp" 2>/dev/null)" = "$(porter_stamp)" ]
}

# porter_venv DIR [fresh]: make DIR a current environment; "fresh" always rebuilds it (CI:
# a dependency missing from pyproject.toml must fail there, not pass on what a reused one has).
porter_venv() {
  local dir="$1" mode="${2:-reuse}"
  if [ "$mode" != fresh ] && porter_venv_current "$dir"; then
    return 0
  fi
  rm -rf "$dir"
  python3 -m venv "$dir"
  "$dir/bin/pip" install -q --disable-pip-version-check -c constraints/cpu.txt -e '.[test]'
  porter_stamp > "$dir/.porter-stamp"
}
