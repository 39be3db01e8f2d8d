// NVLS: all-reduce inside one node with the reduction done by the NVSwitch (NVLink SHARP, H100 and
// later; NCCL's default all-reduce there since 2.17). Each GPU pushes its whole buffer into the
// switch, which reduces it with multimem loads, and pulls the reduced buffer back through
// multicast stores; NCCL pipelines the reduce-scatter and all-gather halves, so both directions
// of every GPU's NVLink carry n (1 + 1/p) bytes at once instead of a ring's 2 (p-1)/p n:
// busbw = 2(p-1)/p n / t reaches 2(p-1)/(p+1) of the link (1.56x at p = 8), which is why
// nccl-tests reports about 480 GB/s on 8 x H100 against 370 for rings.
//
// The engine's flows run GPU to GPU, so the switch's reduction is represented by the traffic it
// puts on each GPU's link: one phase in which every member sends n (p+1) / (p (p-1)) to every
// other, so each link carries exactly n (1 + 1/p) each way; two latency steps (the two halves).
// That is only the node's NVLink star: check_fits refuses members on different nodes.

#include "common.hpp"

#include <algorithm>
#include <string>

namespace stratsim::sim::collectives {

Schedule nvls_schedule(int p, double bytes) {
  Schedule schedule;
  SchedulePhase phase = make_phase("nvls reduce + multicast", 2);
  phase.nvls = true;
  add_all_pairs(phase, identity_members(p), nvls_pair_bytes(p, bytes));
  append(schedule, std::move(phase));
  return schedule;
}

double nvls_pair_bytes(int p, double n) { return n * (p + 1) / (static_cast<double>(p) * (p - 1)); }

double nvls_closed_form(int p, double n, double a, double b) { return 2 * a + n * (p + 1) / p * b; }

}  // namespace stratsim::sim::collectives

namespace stratsim::sim {

// Fitted on 8 H100s (sim/cost-models/h100.yaml): without it a fixed cost fitted at 64 MiB and
// above (88 us) gave NVLS 30-56 % too little busbw at 2-8 MiB, and the selector never ran it below
// 32 MiB.
double nvls_first_loop_seconds(int p, double bytes, const LinkCosts& costs) {
  if (!(costs.nvls_first_loop_fraction > 0) || p < 2) return 0;
  return costs.nvls_first_loop_fraction * std::min(bytes, costs.nvls_first_loop_bytes) * (p + 1) / p * costs.nvls_beta;
}

}  // namespace stratsim::sim
