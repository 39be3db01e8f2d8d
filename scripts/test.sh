#!/usr/bin/env bash
# Sets everything up, builds and runs every test with CTest.
# Usage: scripts/test.sh [--sanitize]   (--sanitize: the ASan+UBSan build in build-asan)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
dir=$(bash scripts/build.sh "$@" | tail -n 1)
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir "$dir" --output-on-failure -j "$(nproc)"
