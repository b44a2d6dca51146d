#!/usr/bin/env bash
# Everything the benchmark needs on a fresh clone: the venv with tapeproxy and its bench extra
# (uvicorn[standard] for the baseline, py-spy), wrk (Debian package `wrk`), and Talkback
# (npm `talkback`, the peer; skipped with a note when node/npm are missing).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install -q -e '.[bench]'

if ! command -v wrk >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq && apt-get install -y -qq wrk
    elif command -v sudo >/dev/null && command -v apt-get >/dev/null; then
        sudo apt-get update -qq && sudo apt-get install -y -qq wrk
    else
        echo "bench/setup.sh: wrk is missing; install it (Debian/Ubuntu: apt-get install wrk," \
            "macOS: brew install wrk). The head-to-head is skipped without it." >&2
    fi
fi

if command -v npm >/dev/null; then
    mkdir -p bench/.peers
    npm install --silent --no-audit --no-fund --prefix bench/.peers talkback@4 \
        || echo "bench/setup.sh: npm could not install talkback; the Talkback column stays empty" >&2
else
    echo "bench/setup.sh: node/npm missing; the Talkback column stays empty" >&2
fi
