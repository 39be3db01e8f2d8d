// Direct: every member sends its block to every other member at once, one step and one alpha
// (two for all-reduce: a direct reduce-scatter then a direct all-gather), with each link carrying
// p - 1 equal flows, so the bandwidth term is still (p-1)/p n beta. The cost is p(p-1) flows per
// phase, which is why the selector considers it only up to 64 members (all-to-all; NCCL's
// point-to-point all-to-all). Broadcast sends p - 1 copies from the root: bound by its egress.
// Scatter sends each member its own chunk from the root (ProcessGroupNCCL's scatter is a group of
// point-to-point sends; Gloo's sends to each rank in turn): one step, (p-1)/p n through its egress.

#include "common.hpp"

#include <string>
#include <utility>

namespace stratsim::sim::collectives {

using core::CollectiveKind;

Schedule direct_schedule(CollectiveKind kind, int p, double bytes) {
  Schedule schedule;
  const std::vector<int> members = identity_members(p);
  auto all_pairs = [&](std::string label) {
    SchedulePhase phase = make_phase(std::move(label), 1);
    phase.flows.reserve(static_cast<std::size_t>(p) * (p - 1));
    add_all_pairs(phase, members, bytes / p);
    append(schedule, std::move(phase));
  };
  switch (kind) {
    case CollectiveKind::all_reduce:
      all_pairs("direct reduce-scatter");
      all_pairs("direct all-gather");
      break;
    case CollectiveKind::all_gather:
      all_pairs("direct all-gather");
      break;
    case CollectiveKind::reduce_scatter:
      all_pairs("direct reduce-scatter");
      break;
    case CollectiveKind::all_to_all:
      all_pairs("direct all-to-all");
      break;
    case CollectiveKind::broadcast: {
      // The root's link carries p-1 copies of the buffer: cheap in latency, bound by its egress.
      SchedulePhase phase = make_phase("direct broadcast", 1);
      for (int dst = 1; dst < p; ++dst) add_flow(phase, 0, dst, bytes);
      append(schedule, std::move(phase));
      break;
    }
    case CollectiveKind::scatter: {
      SchedulePhase phase = make_phase("direct scatter", 1);
      for (int dst = 1; dst < p; ++dst) add_flow(phase, 0, dst, bytes / p);
      append(schedule, std::move(phase));
      break;
    }
  }
  return schedule;
}

double direct_closed_form(CollectiveKind kind, int p, double n, double a, double b) {
  switch (kind) {
    case CollectiveKind::all_reduce:  // direct reduce-scatter + direct all-gather
      return 2 * (a + ring_pass_bytes(p, n) * b);
    case CollectiveKind::all_gather:
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::all_to_all:
    case CollectiveKind::scatter:  // the root's egress: (p-1)/p n
      return a + ring_pass_bytes(p, n) * b;
    case CollectiveKind::broadcast:  // bound by the root's egress
      return a + (p - 1) * n * b;
  }
  return 0;
}

}  // namespace stratsim::sim::collectives
