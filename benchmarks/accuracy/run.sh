#!/usr/bin/env bash
# The accuracy suite: every comparison of stratsim's predictions with a published or measured run
# that this tree can make, each printed as a Markdown table (benchmarks/README.md, Accuracy).
#
#   bash benchmarks/accuracy/run.sh [BUILD_DIR]      (default: build)
#
# Here: nccl-tests busbw on one 8-GPU node of each GPU preset against published runs
# (nccl-tests.yaml). The measured half, ten plans on this host's Gloo ranks against the platform
# `stratsim calibrate` writes, is gloo.sh (noisy and slower: run it on a quiet box). Exit status 0
# only if every comparison holds its tolerance.
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
if [[ ! -x "$build/benchmarks/accuracy_nccl_tests" ]]; then
  echo "run.sh: $build/benchmarks/accuracy_nccl_tests is missing: build with -DSTRATSIM_BUILD_BENCHMARKS=ON" >&2
  exit 2
fi
echo "## nccl-tests busbw, one 8-GPU node (published runs: $here/nccl-tests.yaml)"
echo
"$build/benchmarks/accuracy_nccl_tests" "$here/nccl-tests.yaml"
