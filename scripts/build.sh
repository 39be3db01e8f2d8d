#!/usr/bin/env bash
# Configures and builds stratsim. Usage: scripts/build.sh [--sanitize]   (build dir: build or build-asan)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build
flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
if [ "${1:-}" = "--sanitize" ]; then
  dir=build-asan
  flags=(-DCMAKE_BUILD_TYPE=Debug -DSTRATSIM_SANITIZE=ON -DSTRATSIM_BUILD_BENCHMARKS=OFF)
fi
cmake -S . -B "$dir" -G Ninja "${flags[@]}" >/dev/null
ninja -C "$dir" -j "$(nproc)"
echo "$dir"
