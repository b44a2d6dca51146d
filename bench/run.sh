#!/usr/bin/env bash
# One command on a fresh clone: set up (bench/setup.sh), then run the benchmark.
#   bash bench/run.sh [--quick] [--head-to-head] [--json FILE] ...
set -euo pipefail
cd "$(dirname "$0")/.."
bash bench/setup.sh
exec .venv/bin/python bench/run.py "$@"
