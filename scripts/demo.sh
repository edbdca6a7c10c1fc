#!/usr/bin/env bash
# The README's first command: set up on a fresh machine and run porter's main job on its
# built-in default: diagnose the default model (transformer) from torch eager on the CPU to
# XLA (torchax/JAX) on the CPU, with per-module accuracy and the reports.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
porter_venv .venv  # built once, shared with scripts/test.sh, reused while current
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-3}"  # XLA's C++ logging
.venv/bin/porter diagnose transformer --from cpu --to xla -o porter-out/demo
echo "open porter-out/demo/report.html in a browser; porter-out/demo/summary.md is the one-page version"
