#!/usr/bin/env bash
# The accuracy suite: every comparison of stratsim's predictions with a published or measured run
# that this tree can make, each printed as a Markdown table (benchmarks/README.md, Accuracy).
#
#   bash benchmarks/accuracy/run.sh [BUILD_DIR]      (default: build)
#
# Here: nccl-tests busbw on one 8-GPU node of each GPU preset against published runs
# (nccl-tests.yaml), and torchtitan's published Llama 3.1 8B FSDP throughput and memory on 8 H100s
# (torchtitan/check.sh, also the accuracy_torchtitan CTest test: the selective op run torchtitan
# made must be within 10 % on throughput), Megatron-LM's published A100 runs (megatron/check.sh,
# also the accuracy_megatron CTest test), and
# Llama 3.1 8B with 2 to 8 layers trained by PyTorch on one H100 and one H200 (gpu/measured/ and
# gpu/measured/h200/, recorded by gpu/measure.sh; no network: the compute and memory model alone),
# with the H200 runs' caching-allocator histories (reserved memory). The measured half, ten plans on this host's Gloo ranks against the platform
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

# torchtitan's published Llama 3.1 8B FSDP run on 8 H100s (torchtitan/check.sh says the source).
echo
echo "## torchtitan Llama 3.1 8B, FSDP on 8 H100 at 500 W (published: 5,762 tokens/s/GPU, 82.4 GiB, selective op AC)"
echo
status=0
bash "$here/torchtitan/check.sh" "$build" || status=1

echo
echo "## Megatron-LM on A100: a 22B GPT on one node (arXiv 2205.05198), Table 1's GPTs on 4-32 nodes (arXiv 2104.04473)"
echo
bash "$here/megatron/check.sh" "$build" || status=1

# One GPU, measured (gpu/measured/*.json on an H100, gpu/measured/h200/*.json on an H200; PyTorch
# 2.11, FSDP2 at world size 1; gpu/measure.sh records them all): each run's median step and peak
# allocated memory beside the preset's prediction for the same model and plan. Memory within 5 %
# or the run fails; step time is printed with its error (issue 14 asks for 10 % on the published
# 8-GPU run; these are its evidence).
plan=$(mktemp --suffix=.yaml)
trap 'rm -f "$plan"' EXIT
# llama_step.py's own plan into $plan: FSDP2 per block (reshard_after_forward=True), then the root,
# bfloat16 params and float32 reduce; clip_grad_norm_(max_norm=1) before the fused AdamW step;
# PyTorch 2.11; activation checkpointing AC (none, full or selective_op) on every block.
write_llama_plan() { # BATCH AC
  local mp='mp_policy: {param_dtype: bfloat16, reduce_dtype: float32}'
  { echo "world_size: 1"; echo "batch_size: $1"; echo "optimizer: {type: adamw, max_norm: 1.0}"
    echo 'torch_version: "2.11"'; echo "steps:"
    case $2 in
      full) echo '  - checkpoint: {module: "layers.*"}' ;;
      selective_op) echo '  - checkpoint: {module: "layers.*", policy: selective_op}' ;;
    esac
    echo "  - torch.distributed.fsdp.fully_shard: {module: \"layers.*\", reshard_after_forward: true, $mp}"
    echo "  - torch.distributed.fsdp.fully_shard: {module: \"\", $mp}"
  } >"$plan"
}
measured_on_one_gpu() { # DIR PRESET GPU
  local dir=$1 preset=$2 gpu=$3 run
  echo
  echo "## Llama 3.1 8B layers on one $gpu (measured with PyTorch 2.11: $dir/), simulated on \`$preset:gpus=1\`"
  echo
  echo "| layers | AC | norm | measured step | simulated | error | measured peak | simulated | error |"
  echo "|---:|---|---|---:|---:|---:|---:|---:|---:|"
  # llama<layers>_<ac>[_eager_norm].json: one training run each (other measurements sit beside them)
  for run in "$dir"/llama*.json; do
    field() { { grep -o "\"$1\": *[^,}]*" "$run" || true; } | head -1 | sed 's/.*: *//; s/"//g'; }
    layers=$(field layers) ac=$(field ac) norm=$(field norm) batch=$(field batch) seq=$(field seq)
    dim=$(field dim) heads=$(field n_heads) kv_heads=$(field n_kv_heads) ffn=$(field ffn) vocab=$(field vocab)
    for value in "$layers" "$ac" "$norm" "$batch" "$seq" "$dim" "$heads" "$kv_heads" "$ffn" "$vocab"; do
      [[ -n $value ]] || { echo "run.sh: $run: a config field is missing" >&2; exit 2; }
    done
    write_llama_plan "$batch" "$ac"
    model="zoo:gpt:layers=$layers,hidden=$dim,heads=$heads,kv_heads=$kv_heads,ffn=$ffn,vocab=$vocab,seq=$seq,norm=$norm"
    tps=$("$build/stratsim" simulate --quiet --model "$model" --plan "$plan" --iterations 2 --platform "$preset:gpus=1" --json |
      grep -o '"tokens_per_s": *[0-9.e+]*' | tail -1 | sed 's/.*: *//')
    peak=$("$build/stratsim" plan --model "$model" --plan "$plan" --iterations 2 --json |
      grep -o '"peak": *[0-9]*' | tail -1 | sed 's/.*: *//')
    awk -v l="$layers" -v a="$ac" -v n="$norm" -v t="$tps" -v m="$peak" -v step="$(field median_step_s)" -v tokens=$((batch * seq)) \
      -v real="$(field peak_allocated_bytes)" 'BEGIN {
      sim = tokens / t; te = (sim / step - 1) * 100; me = (m / real - 1) * 100
      printf "| %d | %s | %s | %.1f ms | %.1f ms | %+.1f %% | %.1f GiB | %.1f GiB | %+.1f %% |\n", l, a, n, step * 1e3, sim * 1e3, te,
        real / 1073741824, m / 1073741824, me
      exit (me > 5 || me < -5) }' || status=1
  done
}
measured_on_one_gpu "$here/gpu/measured" h100 H100
measured_on_one_gpu "$here/gpu/measured/h200" h200 H200

# Reserved memory: PyTorch's caching allocator on the same H200 runs (gpu/measured/h200/memory/,
# each run recorded with default and with expandable segments) against the reserved peaks the
# planner's allocation history gives. Within 1 % (expandable) and 1.5 % (default) or the run fails
# (the ReservedPeak unit test checks the same).
echo
echo "## Reserved memory on one H200 (PyTorch's caching allocator, $here/gpu/measured/h200/memory/)"
echo
echo "| layers | AC | default segments: PyTorch | predicted | error | expandable segments: PyTorch | predicted | error |"
echo "|---:|---|---:|---:|---:|---:|---:|---:|"
recorded_reserved() { gzip -dc "$1" | grep -o '"reserved_bytes.all.peak": *[0-9]*' | head -1 | sed 's/.*: *//'; }
for history in "$here"/gpu/measured/h200/memory/llama*_expandable.json.gz; do
  name=$(basename "$history" _expandable.json.gz)
  layers=${name#llama}; layers=${layers%%_*}; ac=${name#llama"$layers"_}
  write_llama_plan 2 "$ac"
  model="zoo:gpt:layers=$layers,hidden=4096,heads=32,kv_heads=8,ffn=14336,vocab=128256,seq=8192,norm=fused"
  report=$("$build/stratsim" plan --model "$model" --plan "$plan" --iterations 2 --json)
  predicted() { grep -o "\"$1\": *[0-9]*" <<<"$report" | tail -1 | sed 's/.*: *//'; }
  awk -v l="$layers" -v a="$ac" -v rd="$(recorded_reserved "${history%_expandable.json.gz}.json.gz")" \
    -v pd="$(predicted reserved_peak)" -v re="$(recorded_reserved "$history")" -v pe="$(predicted reserved_peak_expandable)" 'BEGIN {
    g = 1073741824; ed = (pd / rd - 1) * 100; ee = (pe / re - 1) * 100
    printf "| %d | %s | %.2f GiB | %.2f GiB | %+.1f %% | %.2f GiB | %.2f GiB | %+.1f %% |\n", l, a, rd / g, pd / g, ed,
      re / g, pe / g, ee
    exit (ee > 1 || ee < -1 || ed > 1.5 || ed < -1.5) }' || status=1
done
echo
echo "Step time: the H100 runs simulate 0.4-2.8 % fast, the H200 runs 0.0 % to 2.6 % slow (the H200's"
echo "GEMM table is swept at the clock its power cap holds; a step's GEMMs run faster). Memory: the"
echo "peak is the loss's backward."
exit $status
