#!/usr/bin/env bash
# The measured half of the accuracy suite: ten plans on 2 and 4 Gloo ranks of this host, each
# run for real (`stratsim run --compute gemm`) and simulated on the platform `stratsim calibrate`
# wrote on the same host, compared with `stratsim compare`; each plan is run 3 times. Prints a
# Markdown table over the steady iterations of the runs (after the first, which holds DDP's
# parameter broadcast and every buffer's first use): the mean step measured (and the range of the
# runs' means) and simulated; the step error as the median of the
# per-iteration errors (a 2-vCPU VM stalls a step now and then by a scheduler tick or a noisy
# neighbour, +30 % on one step, and the median keeps such a step from deciding the row) and as
# the error of the means; the collective time of the steady iterations, all instances summed,
# and `compare`'s mean |error| per collective op (every op, the first iteration's too).
#
#   bash benchmarks/accuracy/gloo.sh [BUILD_DIR] [PLATFORM.yaml...]
#
# Without PLATFORM it calibrates first (about 75 s). With several, each plan is measured once and
# simulated on every platform, one table per platform: calibrations (or models) compared on the
# same measured runs, free of the run-to-run noise of this VM. The runs take about 4 min
# (GLOO_ACCURACY_RUNS=1: 80 s). The model is zoo:Net:dim=1024 (four 1024 x
# 1024 Linears) at batch 32 per rank: GEMMs of milliseconds, 16 MiB of gradients. Exit status 0
# only when every row has its median step error within 10 % and its collective time within 20 %.
# GLOO_ACCURACY_KEEP=DIR keeps each measured run there as PLAN-RANKS-runR.json;
# GLOO_ACCURACY_FROM=DIR takes the runs from such a folder instead of measuring: runs made on
# another host (with the platform calibrated there), simulated again on other platforms or models.
# GLOO_ACCURACY_MIN_STEP_ROWS=N sets a lower bar for the exit status: at least N of the 20 rows
# with the median step within 10 % (the `accuracy_gloo_replay_*` tests hold the committed runs of
# gloo/measured/ to what the model reaches on them, so a change that loses a row fails).
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
stratsim=$(cd "$build" && pwd)/stratsim
work=$(mktemp -d /tmp/stratsim-gloo-accuracy.XXXXXX)
trap 'rm -rf "$work"' EXIT INT TERM
platforms=("${@:2}")
[[ -z ${GLOO_ACCURACY_KEEP:-} ]] || mkdir -p "$GLOO_ACCURACY_KEEP"
if [[ -n ${GLOO_ACCURACY_FROM:-} ]] && ((${#platforms[@]} == 0)); then
  echo "gloo.sh: GLOO_ACCURACY_FROM needs the platform calibrated where those runs were made (PLATFORM.yaml)" >&2
  exit 2
fi
if ((${#platforms[@]} == 0)); then
  platforms=("$work/calibrated.yaml")
  "$stratsim" calibrate --quiet -o "${platforms[0]}" >&2
fi
model=zoo:Net:dim=1024
# Nine iterations: the first (DDP's broadcast, first use of every buffer) and eight steady ones,
# four whole cycles of the accumulation plan.
iterations=9
# Each plan runs `runs` times (the VM's noise moves one run by as much as the goal); the rows pool
# their steady steps.
runs=${GLOO_ACCURACY_RUNS:-3}
# One row of a platform's table: the simulation against the measured runs of one plan.
row() {
  perl -MJSON::PP -MList::Util=sum,min,max -e '
      sub load { local $/; open my $f, "<", $_[0] or die "$_[0]: $!"; decode_json(<$f>) }
      sub median { my @v = sort { $a <=> $b } @_; @v % 2 ? $v[$#v / 2] : ($v[@v / 2 - 1] + $v[@v / 2]) / 2 }
      # Collective time of the steady iterations, all instances summed: from the end of step 1 on.
      sub steady_collectives {
        my ($report) = @_;
        my $from = $report->{iterations}[0]{end_s};
        sum(0, map { $_->{duration_s} } grep { $_->{start_s} >= $from } @{$report->{collectives}});
      }
      my $sim = load(shift @ARGV);
      my (@errors, @measured, @predicted, @run_means, @run_collectives, @per_op);
      while (my ($cmp_file, $run_file) = splice(@ARGV, 0, 2)) {
        my ($c, $run) = (load($cmp_file), load($run_file));
        my @steady = grep { $_->{iteration} ne "1" } @{$c->{steps}};
        push @errors, map { $_->{predicted_s} / $_->{measured_s} - 1 } @steady;
        push @measured, map { $_->{measured_s} } @steady;
        push @predicted, map { $_->{predicted_s} } @steady;
        push @run_means, sum(map { $_->{measured_s} } @steady) / @steady;
        push @run_collectives, steady_collectives($run);
        push @per_op, $c->{mean_abs_collective_error};
      }
      my ($m, $p) = (sum(@measured) / @measured, sum(@predicted) / @predicted);
      my $median = median(@errors);
      my $collective_error = steady_collectives($sim) / (sum(@run_collectives) / @run_collectives) - 1;
      my $ok = abs($median) <= 0.10 && abs($collective_error) <= 0.20;
      printf "%.1f ms (%.1f-%.1f)|%.1f ms|%+.1f %%|%+.1f %%|%+.1f %%|%.1f %%|%d|%d", 1e3 * $m, 1e3 * min(@run_means),
        1e3 * max(@run_means), 1e3 * $p, 100 * $median, 100 * ($p / $m - 1), 100 * $collective_error,
        100 * sum(@per_op) / @per_op, $ok ? 1 : 0, abs($median) <= 0.10 ? 1 : 0;
    ' "$@"
}
declare -a failed steps_within
for k in "${!platforms[@]}"; do
  failed[k]=0
  steps_within[k]=0
  {
    echo "| plan | ranks | measured step (runs' range) | simulated step | step error (median of steps) | step error (of means) | collective time error | collectives mean \\|error\\| per op |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|"
  } > "$work/table-$k.md"
done
for template in "$here"/gloo/*.yaml; do
  name=$(basename "$template" .yaml)
  for ranks in 2 4; do
    plan=$work/$name-$ranks.yaml
    sed -e "s/__WORLD__/$ranks/" -e "s/__REPLICAS__/$((ranks / 2))/" "$template" > "$plan"
    for ((r = 1; r <= runs; r++)); do
      if [[ -n ${GLOO_ACCURACY_FROM:-} ]]; then
        cp "$GLOO_ACCURACY_FROM/$name-$ranks-run$r.json" "$work/run$r.json"
        continue
      fi
      "$stratsim" run --quiet --model "$model" --plan "$plan" --iterations "$iterations" --json -o "$work/run$r.json"
      [[ -z ${GLOO_ACCURACY_KEEP:-} ]] || cp "$work/run$r.json" "$GLOO_ACCURACY_KEEP/$name-$ranks-run$r.json"
    done
    for k in "${!platforms[@]}"; do
      "$stratsim" simulate --quiet --model "$model" --plan "$plan" --iterations "$iterations" \
        --platform "${platforms[k]}" --json -o "$work/sim.json"
      pairs=()
      for ((r = 1; r <= runs; r++)); do
        "$stratsim" compare "$work/sim.json" "$work/run$r.json" --json -o "$work/cmp$r.json"
        pairs+=("$work/cmp$r.json" "$work/run$r.json")
      done
      IFS='|' read -r measured simulated step_error mean_error coll_time coll_error ok step_ok <<< "$(row "$work/sim.json" "${pairs[@]}")"
      [[ $ok == 1 ]] || failed[k]=$((failed[k] + 1))
      [[ $step_ok == 1 ]] && steps_within[k]=$((steps_within[k] + 1))
      echo "| $name | $ranks | $measured | $simulated | $step_error | $mean_error | $coll_time | $coll_error |" >> "$work/table-$k.md"
    done
  done
done
status=0
for k in "${!platforms[@]}"; do
  ((${#platforms[@]} == 1)) || printf '%s\n\n' "platform ${platforms[k]}:"
  cat "$work/table-$k.md"
  echo
  echo "${failed[k]} of 20 cases outside the goal (median step error within 10 %, collective time within 20 %)"
  echo "${steps_within[k]} of 20 with the median step within 10 %"
  ((${#platforms[@]} == 1)) || echo
  if [[ -n ${GLOO_ACCURACY_MIN_STEP_ROWS:-} ]]; then
    ((steps_within[k] >= GLOO_ACCURACY_MIN_STEP_ROWS)) || status=1
  else
    ((failed[k] == 0)) || status=1
  fi
done
exit "$status"
