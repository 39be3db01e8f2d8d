// Ring: NCCL's default. The members form a ring and every member sends to its successor only, so
// each link carries one flow and the bandwidth term is optimal: all-gather and reduce-scatter
// forward p - 1 chunks of n/p ((p-1)/p n per member), all-reduce does both (2(p-1)/p n). The price
// is latency linear in p: the chunks advance one hop per step, p - 1 steps (2(p-1) for
// all-reduce), which is why NCCL switches to trees for small messages on many ranks.
// Broadcast is a pipelined chain from member 0 ((p-1) alpha + n beta: the whole buffer crosses
// one link's worth of bandwidth); all-to-all is the pairwise exchange, p - 1 permutation steps of
// n/p each. One phase per ring collective: its pipelined steps are latency terms of that phase.

#include "common.hpp"

#include <fmt/format.h>

namespace stratsim::sim::collectives {

using core::CollectiveKind;

// `full` is the size of the group the schedule stands for (see build_folded_schedule): the ring
// closes over the p simulated members but moves the full ring's chunks for its latency steps.
Schedule ring_schedule(CollectiveKind kind, int p, double bytes, int full) {
  Schedule schedule;
  const std::vector<int> members = identity_members(p);
  switch (kind) {
    case CollectiveKind::all_reduce: {
      SchedulePhase phase = make_phase("ring all-reduce", 2 * (full - 1));
      add_ring(phase, members, 2 * ring_pass_bytes(full, bytes));
      append(schedule, std::move(phase));
      break;
    }
    case CollectiveKind::all_gather:
    case CollectiveKind::reduce_scatter: {
      SchedulePhase phase =
          make_phase(kind == CollectiveKind::all_gather ? "ring all-gather" : "ring reduce-scatter", full - 1);
      add_ring(phase, members, ring_pass_bytes(full, bytes));
      append(schedule, std::move(phase));
      break;
    }
    case CollectiveKind::broadcast: {
      // Pipelined chain from member 0: each hop forwards the whole buffer, the hops overlap, so
      // the buffer crosses one link's worth of bandwidth and p-1 latencies. Folded, the hop out
      // of the last simulated member stands for the hop into the next block: the chain closes.
      SchedulePhase phase = make_phase("chain broadcast", full - 1);
      if (full > p) add_ring(phase, members, bytes);
      else add_chain(phase, members, bytes);
      append(schedule, std::move(phase));
      break;
    }
    case CollectiveKind::all_to_all:
      // Pairwise exchange: at step k every member sends its chunk for member i+k. One peer per
      // step keeps each phase a permutation, which no link has to share.
      for (int k = 1; k < p; ++k) {
        SchedulePhase phase = make_phase(fmt::format("pairwise step {}", k), 1);
        phase.flows.reserve(p);
        for (int i = 0; i < p; ++i) add_flow(phase, i, (i + k) % p, bytes / p);
        append(schedule, std::move(phase));
      }
      break;
    case CollectiveKind::scatter:
      fail("a scatter runs direct only (implements() refuses the rest)");
  }
  return schedule;
}

double ring_closed_form(CollectiveKind kind, int p, double n, double a, double b) {
  switch (kind) {
    case CollectiveKind::all_reduce:  // 2(p-1)a + 2(p-1)/p n b
      return 2 * (p - 1) * a + 2 * ring_pass_bytes(p, n) * b;
    case CollectiveKind::all_gather:
    case CollectiveKind::reduce_scatter:  // (p-1)a + (p-1)/p n b
      return (p - 1) * a + ring_pass_bytes(p, n) * b;
    case CollectiveKind::broadcast:  // pipelined chain: (p-1)a + n b
      return (p - 1) * a + n * b;
    case CollectiveKind::all_to_all:  // pairwise: (p-1)(a + n/p b)
      return (p - 1) * (a + (n / p) * b);
    case CollectiveKind::scatter:
      fail("a scatter runs direct only (implements() refuses the rest)");
  }
  return 0;
}

}  // namespace stratsim::sim::collectives
