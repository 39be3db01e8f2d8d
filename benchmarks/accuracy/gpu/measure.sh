#!/usr/bin/env bash
# Every GPU measurement the accuracy suite compares against, on the one CUDA GPU of this machine,
# in the order of their worth (a lease can end early; each step writes its file when done):
#
#   bash benchmarks/accuracy/gpu/measure.sh STRATSIM OUTDIR
#
#   OUTDIR/calibrated.yaml           stratsim calibrate --gpu (cuBLAS GEMM tables, copy rate, floor)
#   OUTDIR/stratsim-run-nccl-llama4.json
#                                    stratsim's own NCCL executor on Llama 3.1 8B's shapes, 4 layers,
#                                    FSDP2 at world size 1, bf16 params, selective AC, 3 iterations
#   OUTDIR/llama4_selective_op.json  PyTorch (FSDP2 at world size 1) on the same model: gpu/llama_step.py
#   OUTDIR/torch_gemms.json          PyTorch's matmuls at the Linears' shapes: gpu/torch_gemms.py
#   OUTDIR/torch_gemms_cool.json     the same, each after 0.5 s idle (the clock before the power cap)
#   OUTDIR/llama4_none.json, llama4_full.json, llama8_selective_op.json, llama2_selective_op.json,
#   OUTDIR/llama4_selective_op_eager_norm.json   the rest of run.sh's table
#
# A device lease returns at most 8 files: `tar -C OUTDIR -czf $OUT/gpu.tgz .` when all are wanted.
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
mp='mp_policy: {param_dtype: bfloat16, reduce_dtype: float32}'
{
  echo "world_size: 1"
  echo "batch_size: 2"
  echo "optimizer: {type: adamw, max_norm: 1.0}"
  echo 'torch_version: "2.11"'
  echo "steps:"
  echo '  - checkpoint: {module: "layers.*", policy: selective_op}'
  echo "  - torch.distributed.fsdp.fully_shard: {module: \"layers.*\", reshard_after_forward: true, $mp}"
  echo "  - torch.distributed.fsdp.fully_shard: {module: \"\", $mp}"
} >"$plan"

step calibrate "$stratsim" calibrate --gpu -o "$out/calibrated.yaml"
step "stratsim run" "$stratsim" run --backend nccl --nproc 1 --compute gemm --model "$model" --plan "$plan" \
  --iterations 3 --quiet --json -o "$out/stratsim-run-nccl-llama4.json"
rm -f "$plan"
llama() { # LAYERS AC [SUFFIX ARGS...]
  local layers=$1 ac=$2 suffix=${3:-}
  shift 2
  (($# > 0)) && shift
  step "llama_step $layers $ac$suffix" python3 "$here/llama_step.py" --layers "$layers" --ac "$ac" --profile "$@" \
    --out "$out/llama${layers}_$ac$suffix.json"
}
llama 4 selective_op
step torch_gemms python3 "$here/torch_gemms.py" --out "$out/torch_gemms.json"
step "torch_gemms cool" python3 "$here/torch_gemms.py" --cool-s 0.5 --out "$out/torch_gemms_cool.json"
llama 4 none
llama 4 full
llama 8 selective_op
llama 2 selective_op
llama 4 selective_op _eager_norm --norm eager
nvidia-smi --query-gpu=temperature.gpu,power.draw,clocks.sm,clocks.mem --format=csv
