// Ring: NCCL's default. The members form a ring and every member sends to its successor only, so
// each link carries one flow and the bandwidth term is optimal: all-gather and reduce-scatter
// forward p - 1 chunks of n/p ((p-1)/p n per member), all-reduce does both (2(p-1)/p n). The price
// is latency linear in p: the chunks advance one hop per step, p - 1 steps (2(p-1) for
// all-reduce), which is why NCCL switches to trees for small messages on many ranks.
// Broadcast is a pipelined chain from member 0 ((p-1) alpha + n beta: the whole buffer crosses
// one link's worth of bandwidth); all-to-all is the pairwise exchange, p - 1 permutation steps of
// n/p each. One phase per ring collective: its pipelined steps are latency terms of that phase.
//
// Across nodes (the same number g >= 2 of members on each of m >= 2 nodes) NCCL's ring is g
// channels or more, spread over the node's NICs. A channel enters a node through one member's NIC,
// walks the node, and leaves through the NIC of the member it ends on (graph/search.cc, crossNic
// 2); every other node runs the channel's partner ring backwards, so the hop into the next node
// lands on the NIC the chunks left by and stays on one rail (graph/connect.cc, "Alternate rings to
// avoid crossing rails"). Each channel carries 1/g of the buffer, so over all channels each edge
// of a node's ring carries (g-1)/g of what a member sends around the whole ring and each rail one
// g-th of it: one ring per node and one per rail, all at once (pipelined), with NCCL's split of
// the ring's steps (tuning.cc: S(m-1) across nodes, S(p-m) inside them; S = 2 for all-reduce, 1
// for all-gather and reduce-scatter). A single ring through one NIC per node, which the flat
// schedule would be, gives 48 GB/s busbw on 2 nodes of 8 H100s where NCCL_ALGO=Ring measured 393
// (benchmarks/README.md). Broadcast keeps its one chain and all-to-all its pairwise steps.

#include "common.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace stratsim::sim::collectives {

using core::CollectiveKind;

namespace {

// The kinds whose ring runs a channel per NIC across nodes.
bool runs_in_channels(CollectiveKind kind) {
  return kind == CollectiveKind::all_reduce || kind == CollectiveKind::all_gather ||
         kind == CollectiveKind::reduce_scatter;
}

// S: the ring passes over the buffer (an all-reduce is a reduce-scatter and an all-gather).
int ring_passes(CollectiveKind kind) { return kind == CollectiveKind::all_reduce ? 2 : 1; }

// One ring through the p members. `full` is the size of the group the schedule stands for (see
// build_folded_schedule): the ring closes over the p simulated members but moves the full ring's
// chunks for its latency steps.
Schedule flat_ring_schedule(CollectiveKind kind, int p, double bytes, int full) {
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

// A channel per NIC across nodes. `full_m`: the node count of the group the schedule stands for.
// Folded, the rails close over the simulated nodes and every flow and step count is the full
// ring's.
Schedule channel_rings_schedule(CollectiveKind kind, const NodeLayout& layout, double bytes, int full_m) {
  const int g = layout.g(), full_p = g * full_m, passes = ring_passes(kind);
  const double ring_bytes = passes * ring_pass_bytes(full_p, bytes);  // each member sends, all channels
  Schedule schedule;
  append(schedule,
         rings_phase("ring channels inside nodes", passes * (full_p - full_m), layout.nodes, ring_bytes * (g - 1) / g));
  append(schedule, rings_phase("ring channels across nodes", passes * (full_m - 1), layout.rails(), ring_bytes / g));
  schedule.pipelined = true;  // the channels' chunks are in every hop at once
  return schedule;
}

}  // namespace

Schedule ring_schedule(CollectiveKind kind, const std::vector<int>& member_nodes, double bytes, int full) {
  const int p = static_cast<int>(member_nodes.size());
  if (runs_in_channels(kind)) {
    const NodeLayout layout = node_layout(member_nodes);
    if (layout.hierarchical()) return channel_rings_schedule(kind, layout, bytes, layout.m() * (full / p));
  }
  return flat_ring_schedule(kind, p, bytes, full);
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

namespace stratsim::sim {

using namespace collectives;

// The pipelined estimate of channel_rings_schedule, with R = S (p-1)/p n each member sends over all
// channels and p = g m:
//   (S(p-m) - 1) a_i + (S(m-1) - 1) a_e + max(a_i + (g-1)/g R b_i, a_e + R/g b_e).
double ring_across_nodes_closed_form_time(CollectiveKind kind, int g, int m, double bytes, const LinkCosts& costs) {
  check_node_shape("ring across nodes", g, m, bytes, costs);
  if (!runs_in_channels(kind))
    fail(fmt::format("the ring runs channels across nodes for all_reduce, all_gather and reduce_scatter, not {}",
                     kind_name(kind)));
  if (bytes == 0) return 0;
  const int p = g * m, passes = ring_passes(kind);
  const double ring_bytes = passes * ring_pass_bytes(p, bytes);
  return (passes * (p - m) - 1) * costs.alpha_intra + (passes * (m - 1) - 1) * costs.alpha_inter +
         std::max(costs.alpha_intra + ring_bytes * (g - 1) / g * costs.beta_intra,
                  costs.alpha_inter + ring_bytes / g * costs.beta_inter);
}

}  // namespace stratsim::sim
