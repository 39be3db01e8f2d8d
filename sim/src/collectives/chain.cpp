// Chain: NCCL's tree all-reduce inside one node. NCCL's trees are double binary trees of the
// nodes; inside a node each channel's tree is a chain through the node's GPUs in its ring order
// (graph/connect.cc), so on a single node "Tree" is a chain of p members and no binary tree at
// all. Its tuner prices it that way: 2 (p - 1) intra-node hops of latency (tuning.cc: the tree's
// latency is 2 ((nRanks/nNodes - 1) intraLat + log2(nNodes) interLat)), against the binary tree's
// 2 ceil(log2 p). The chain reduces towards its head and broadcasts back down, chunk by chunk, so
// both directions run at once: a middle member receives n from below (the reduce) and n from above
// (the broadcast), 2 n each way, the same volume as the binary tree's busiest member.
//
// One pipelined schedule (collective.hpp, Schedule::pipelined) of two phases of p - 1 steps each:
// every flow at once on an idle star, each link carrying at most two equal flows, so every flow
// drains at half its link's rate and they finish together (common.hpp's third balanced shape).

#include "common.hpp"

namespace stratsim::sim::collectives {

Schedule chain_schedule(int p, double bytes) {
  SchedulePhase reduce = make_phase("chain reduce", p - 1);
  SchedulePhase broadcast = make_phase("chain broadcast", p - 1);
  for (int member = 1; member < p; ++member) {
    add_flow(reduce, member, member - 1, bytes);
    add_flow(broadcast, member - 1, member, bytes);
  }
  Schedule schedule;
  append(schedule, std::move(reduce));
  append(schedule, std::move(broadcast));
  schedule.pipelined = true;
  return schedule;
}

// The pipeline pays one route latency for its flows and then the rest of both phases' steps:
// (2 (p - 1) - 1) a. A middle member (p >= 3) sends and receives 2 n; with p = 2 each member sends
// n one way and receives n the other.
double chain_closed_form(int p, double n, double a, double b) {
  const int volume = p >= 3 ? 2 : 1;
  return (2 * (p - 1) - 1) * a + volume * n * b;
}

}  // namespace stratsim::sim::collectives
