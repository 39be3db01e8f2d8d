#!/usr/bin/env bash
# Published Megatron-LM training runs on A100 against stratsim's prediction, as a Markdown table.
# Two papers of NVIDIA's Megatron-LM team, both on Selene (DGX A100 nodes: 8 x A100-SXM4-80GB on
# NVSwitch, 8 x 200 Gb/s HDR InfiniBand each), fp16 mixed precision, seq 2048, vocab 51200:
#
# - Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (arXiv
#   2205.05198): a 22B GPT (48 layers, hidden 6144, 64 heads) on one node, tensor parallel 8,
#   batch 4. Table 4: the forward and backward time of one transformer layer under five
#   configurations; Table 5: the iteration time under full recomputation (1.42 s) and under
#   sequence parallelism with selective recomputation (1.10 s).
# - Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
#   Megatron-LM" (SC21, arXiv 2104.04473), Table 1's rows without pipeline parallelism: 1.7B on 32
#   GPUs (data parallel), 3.6B, 7.5B and 18.4B on 64-256 GPUs (tensor parallel 2, 4, 8 inside a
#   node, PyTorch DDP across nodes). The table gives teraFLOP/s per GPU, X, computed from the
#   iteration time T by its equation (3), F = 96 B s l h^2 (1 + s / 6h + V / 16lh) = n X T: the
#   iteration time compared here is F / (n X). Configurations from NVIDIA/Megatron-LM
#   examples/sc21/run_table_1.sh and CONFIG.sh.
#
# The model is the zoo's GPT (learned positions, biases, LayerNorm, GELU MLP of 4h) with the math
# path of attention and attention dropout 0.1, as Megatron ran it before flash attention; the plans
# (this folder) say how each run was parallelised. Each row's error is simulated / published - 1.
# Exit status 1 if a row outside 10 % is not in the known-miss list below, or a listed row has come
# within 10 % (so the list stays true); 2 on a usage error.
#
#   bash benchmarks/accuracy/megatron/check.sh [BUILD_DIR]      (default: build)
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
[[ -x "$build/stratsim" ]] || { echo "check.sh: $build/stratsim is missing: build first" >&2; exit 2; }
work=$(mktemp -d /tmp/stratsim-megatron.XXXXXX)
trap 'rm -rf "$work"' EXIT INT TERM

gpt() {  # layers hidden heads
  echo "zoo:gpt:style=gpt,layers=$1,hidden=$2,heads=$3,ffn=$((4 * $2)),vocab=51200,seq=2048,dtype=float16,attention=math,dropout=0.1"
}

# Known misses: "row|quantity" -> why. A row outside 10 % must be here, and a row here must be
# outside 10 %.
declare -A known=(
  ["GPT 18.4B, 256 x A100 (arXiv 2104.04473, Table 1: 135 TFLOP/s)|iteration"]="fast by 10.1 %; the one row with gradient accumulation (4 micro-steps of 8) and the largest TP all-reduces (201 MB, 240 a micro-step, 19 % of the simulated step); layers of the same width at batch 4 (the 22B rows) are within 1 %, so the cause is not established"
)

# The per-layer times of the middle layer, from the timeline of the last micro-step: forward, and
# backward with its recomputation (the optimizer's collectives left out).
layer_times() {  # timeline layer
  perl -MJSON::PP -e '
    local $/; open my $f, "<", $ARGV[0] or die "$ARGV[0]: $!"; my $d = decode_json(<$f>);
    my ($ops, $t, $k) = ($d->{program}{ops}, $d->{run}{timings}[0], $ARGV[1]);
    my $last = 0; $_->{iteration} > $last and $last = $_->{iteration} for @$ops;
    my %span;
    for my $op (@$ops) {
      next unless $op->{iteration} == $last && ($op->{module} // "") =~ /^h\.\Q$k\E(\.|$)/;
      next if $op->{phase} eq "optimizer" || $op->{phase} eq "init";
      my $p = $op->{phase} eq "forward" ? "forward" : "backward";
      my ($s, $e) = ($t->{start_s}[$op->{id}], $t->{end_s}[$op->{id}]);
      $span{$p} = [$s, $e] unless $span{$p};
      $span{$p}[0] = $s if $s < $span{$p}[0];
      $span{$p}[1] = $e if $e > $span{$p}[1];
    }
    printf "%.6f %.6f\n", map { 1e3 * ($span{$_}[1] - $span{$_}[0]) } qw(forward backward);
  ' "$1" "$2"
}

# The sum of the last N micro-steps' times: one optimizer step.
step_time() {  # report micro_steps
  perl -MJSON::PP -MList::Util=sum -e '
    local $/; open my $f, "<", $ARGV[0] or die "$ARGV[0]: $!"; my @it = @{decode_json(<$f>)->{iterations}};
    printf "%.6f\n", sum(map { $_->{step_time_s} } @it[-$ARGV[1] .. -1]);
  ' "$1" "$2"
}

status=0
row() {  # run configuration quantity unit published simulated
  local key="$1|$3"
  read -r error inside < <(awk -v p="$5" -v s="$6" 'BEGIN { e = (s / p - 1) * 100; printf "%+.1f %d\n", e, (e <= 10 && e >= -10) }')
  local note="within 10 %"
  if [[ -n ${known[$key]:-} ]]; then
    note="known miss: ${known[$key]}"
    ((inside == 0)) || { note="listed as a known miss but within 10 %: update the list"; status=1; }
  elif ((inside == 0)); then
    note="outside 10 % and not listed"; status=1
  fi
  printf "| %s | %s | %s | %s %s | %.3f %s | %s %% | %s |\n" "$1" "$2" "$3" "$5" "$4" "$6" "$4" "$error" "$note"
}

echo "| published run | configuration | quantity | published | simulated | error | |"
echo "|---|---|---|---:|---:|---:|---|"

# Korthikanti et al. 2022: per-layer times (Table 4) and iterations (Table 5).
model22=$(gpt 48 6144 64)
while IFS='|' read -r plan label forward backward iteration; do
  "$build/stratsim" simulate --quiet --model "$model22" --plan "$here/$plan.yaml" --platform a100 --iterations 2 \
    --json -o "$work/report.json" --timeline "$work/timeline.json"
  read -r sim_forward sim_backward < <(layer_times "$work/timeline.json" 24)
  row "22B, 8 x A100 (arXiv 2205.05198)" "TP 8, $label" "layer forward" ms "$forward" "$sim_forward"
  row "22B, 8 x A100 (arXiv 2205.05198)" "TP 8, $label" "layer backward" ms "$backward" "$sim_backward"
  [[ -z $iteration ]] || row "22B, 8 x A100 (arXiv 2205.05198)" "TP 8, $label" "iteration" s "$iteration" \
    "$(step_time "$work/report.json" 1)"
done <<'ROWS'
22b_tp8_no_recompute|no recomputation|7.7|11.9|
22b_tp8_sequence_parallel|sequence parallel|7.2|11.8|
22b_tp8_full_recompute|full recomputation|7.7|19.5|1.42
22b_tp8_selective|selective recomputation|7.7|13.2|
22b_tp8_selective_sp|selective + sequence parallel|7.2|13.1|1.10
ROWS

# Narayanan et al. 2021, Table 1 without pipeline parallelism: T = F / (n X).
while IFS='|' read -r plan label parallel layers hidden heads gpus batch micro_steps tflops; do
  published=$(awk -v l="$layers" -v h="$hidden" -v b="$batch" -v n="$gpus" -v x="$tflops" 'BEGIN {
    s = 2048; v = 51200; f = 96 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h)); printf "%.3f", f / (n * x * 1e12) }')
  "$build/stratsim" simulate --quiet --model "$(gpt "$layers" "$hidden" "$heads")" --plan "$here/$plan.yaml" \
    --platform "a100:nodes=$((gpus / 8))" --iterations $((2 * micro_steps)) --json -o "$work/report.json"
  row "GPT $label, $gpus x A100 (arXiv 2104.04473, Table 1: $tflops TFLOP/s)" "$parallel" "iteration" s \
    "$published" "$(step_time "$work/report.json" "$micro_steps")"
done <<'ROWS'
table1_1.7b|1.7B|DP 32, micro-batch 16|24|2304|24|32|512|1|137
table1_3.6b|3.6B|TP 2 x DP 32, micro-batch 16|30|3072|32|64|512|1|138
table1_7.5b|7.5B|TP 4 x DP 32, micro-batch 16|36|4096|32|128|512|1|142
table1_18.4b|18.4B|TP 8 x DP 32, 4 micro-batches of 8|40|6144|48|256|1024|4|135
ROWS
exit $status
