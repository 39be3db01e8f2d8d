#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/) with clang, ASan and UBSan in build-fuzz, then fuzzes
# each for a bounded time, as many at once as there are cores, starting from its committed corpus
# and test data.
# Usage: scripts/fuzz.sh [--seconds N] [TARGET...]   (default: 60 s each, every target)
# New interesting inputs go to build-fuzz/corpus/TARGET (not the source tree: copy the ones worth
# keeping into tests/fuzz/corpus/TARGET). A finding leaves its input in build-fuzz/findings/TARGET/
# and the script exits 1; keep it as tests/fuzz/regressions/TARGET/WHAT-IT-BROKE once fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=60
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
bash scripts/install-deps.sh --fuzz
rm -f build-fuzz/fuzz_*.inputs  # written anew by the configure: no target removed since stays listed
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATSIM_FUZZ=ON \
  -DSTRATSIM_BUILD_GUI=OFF -DSTRATSIM_BUILD_BENCHMARKS=OFF >/dev/null
if [ ${#targets[@]} -eq 0 ]; then
  for inputs in build-fuzz/fuzz_*.inputs; do
    name=$(basename "$inputs" .inputs)
    targets+=("${name#fuzz_}")
  done
fi
ninja -C build-fuzz -j "$(nproc)" "${targets[@]/#/fuzz_}"

# One target: libFuzzer over the scratch corpus (first: new inputs land there) and the seeds.
fuzz_one() {
  local name=$1
  local work=build-fuzz/corpus/$name findings=build-fuzz/findings/$name
  mkdir -p "$work" "$findings"
  mapfile -t seeds <build-fuzz/fuzz_"$name".inputs
  # -rss_limit_mb: the limits (core/include/stratsim/core/limits.hpp) keep any input far below it;
  # -timeout: one input taking this long is a hang. ASan's leak check runs at exit.
  if build-fuzz/fuzz_"$name" -max_total_time="$seconds" -timeout=25 -rss_limit_mb=2048 -max_len=65536 \
      -print_final_stats=1 -artifact_prefix="$findings/" "$work" "${seeds[@]}" >build-fuzz/fuzz_"$name".log 2>&1; then
    echo "fuzz $name: $(grep -E '^#[0-9]+.*DONE' build-fuzz/fuzz_"$name".log | tail -1)" \
      "$(grep -E 'stat::number_of_executed_units' build-fuzz/fuzz_"$name".log)"
  else
    echo "fuzz $name: FINDING, input in $findings/:"
    ls "$findings"
    { grep -aE 'ERROR|what\(\)|SUMMARY|runtime error' build-fuzz/fuzz_"$name".log || true; } | head -8 || true
    echo "fuzz $name: the input, base64 (save it as tests/fuzz/regressions/$name/WHAT-IT-BROKE):"
    { base64 "$findings"/* || true; } | head -40 || true
    return 1
  fi
}

status=0
pids=()
for name in "${targets[@]}"; do
  fuzz_one "$name" &
  pids+=($!)
  if [ ${#pids[@]} -ge "$(nproc)" ]; then
    wait "${pids[0]}" || status=1
    pids=("${pids[@]:1}")
  fi
done
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
exit $status
