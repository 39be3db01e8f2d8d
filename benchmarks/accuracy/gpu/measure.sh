#!/usr/bin/env bash
# Every GPU measurement the accuracy suite compares against, on the one CUDA GPU of this machine,
# in the order of their worth (a lease can end early; each step writes its file when done):
#
#   bash benchmarks/accuracy/gpu/measure.sh STRATSIM OUTDIR
#
#   OUTDIR/calibrated.yaml           stratsim calibrate --gpu (cuBLAS GEMM tables, copy rate, floor)
#   OUTDIR/stratsim-run-nccl-llama4.json
#                                    stratsim's own NCCL executor on Llama 3.1 8B's shapes, 4 layers,
#                                    FSDP at world size 1, bf16 params, selective AC, 3 iterations
#   OUTDIR/llama4_selective_op.json  PyTorch (FSDP2 at world size 1) on the same model: gpu/llama_step.py
#   OUTDIR/torch_gemms.json          PyTorch's matmuls at the Linears' shapes: gpu/torch_gemms.py
#   OUTDIR/llama4_none.json, llama4_full.json, llama8_selective_op.json
#
# Needs a CUDA GPU, a stratsim built with NCCL, and a python3 with PyTorch (not a dependency of
# stratsim: the measurements are committed under gpu/measured/<gpu>/). Prints the GPU, its clocks
# and power limit first, and how long each step took.
set -uo pipefail
stratsim=${1:?usage: measure.sh STRATSIM OUTDIR}
out=${2:?usage: measure.sh STRATSIM OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"

nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm,clocks.max.mem \
  --format=csv || exit 2

step() { # NAME COMMAND...: runs it, says how long it took and whether it failed
  local name=$1 start=$SECONDS
  shift
  echo "== $name"
  "$@"
  echo "== $name: exit $?, $((SECONDS - start)) s"
}

model="zoo:gpt:layers=4,hidden=4096,heads=32,kv_heads=8,ffn=14336,vocab=128256,seq=8192,norm=fused"
plan="$out/.plan.yaml"
{
  echo "world_size: 1"
  echo "batch_size: 2"
  echo "optimizer: {type: adamw}"
  echo "steps:"
  for i in 0 1 2 3; do echo "  - checkpoint: {module: layers.$i, policy: selective_op}"; done
  echo '  - fully_shard: {module: "", strategy: FULL_SHARD, policy: {module_types: [TransformerBlock]}, mixed_precision: {param_dtype: bfloat16, reduce_dtype: float32}}'
} >"$plan"

step calibrate "$stratsim" calibrate --gpu -o "$out/calibrated.yaml"
step "stratsim run" "$stratsim" run --backend nccl --nproc 1 --compute gemm --model "$model" --plan "$plan" \
  --iterations 3 --quiet --json -o "$out/stratsim-run-nccl-llama4.json"
rm -f "$plan"
llama() { # LAYERS AC
  step "llama_step $1 $2" python3 "$here/llama_step.py" --layers "$1" --ac "$2" --profile \
    --out "$out/llama$1_$2.json"
}
llama 4 selective_op
step torch_gemms python3 "$here/torch_gemms.py" --out "$out/torch_gemms.json"
llama 4 none
llama 4 full
llama 8 selective_op
nvidia-smi --query-gpu=temperature.gpu,power.draw,clocks.sm,clocks.mem --format=csv
