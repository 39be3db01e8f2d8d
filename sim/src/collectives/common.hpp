// Shared by the collective algorithms (one file each in this directory): argument checks, the
// building blocks of phases (flows, rings, chains, all-pairs), a group's node layout, and each
// algorithm's entry points for collective.cpp (the dispatcher) and selection.cpp.
//
// Every phase is built so that on an idle uniform star (one full-duplex link of bandwidth
// B = 1/beta per member into a non-blocking switch) the SimGrid engine's max-min sharing finishes
// it in exactly latency_steps * alpha + max(member egress, member ingress) * beta. That holds
// because each phase is one of three balanced shapes:
//   * every member sends at most one flow and receives at most one flow (rings, chains, pairwise
//     exchanges, Bruck steps, fold/unfold): each flow has its links to itself;
//   * every member of a group sends one equal flow to every other member (direct, hierarchical
//     all-to-all): all links carry the same load, so fair shares are equal and finish together;
//   * all flows of a phase have the same size and the busiest links carry the most of them
//     (double binary tree, direct broadcast): every flow gets at least the share of the busiest
//     link, so the phase ends exactly when the busiest link drains.
// Every algorithm file keeps to these shapes; its closed form is the same formula worked out for
// the schedule it builds, which the tests compare with hand-worked values and with the engine.
#pragma once

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stratsim/sim/collective.hpp"

namespace stratsim::sim::collectives {

using core::CollectiveKind;

// Bit tricks below shift 1 << k for k < 31; groups this large are far beyond any real job.
constexpr int kMaxMembers = 1 << 29;

[[noreturn]] inline void fail(const std::string& message) { throw std::invalid_argument(message); }

inline std::string_view kind_name(CollectiveKind kind) { return core::collective_kind_name(kind); }

inline int floor_log2(int p) { return std::bit_width(static_cast<unsigned>(p)) - 1; }
inline int ceil_log2(int p) { return p <= 1 ? 0 : std::bit_width(static_cast<unsigned>(p - 1)); }

inline void check_group_size(long long p) {
  if (p < 1) fail("a collective needs at least one member");
  if (p > kMaxMembers) fail(fmt::format("a collective group of {} members is too large (at most {})", p, kMaxMembers));
}

inline void check_bytes(double bytes) {
  if (!std::isfinite(bytes) || bytes < 0) fail(fmt::format("collective bytes must be finite and >= 0, got {}", bytes));
}

inline void check_cost(double value, std::string_view name) {
  if (!std::isfinite(value) || value < 0)
    fail(fmt::format("link cost {} must be finite and >= 0, got {}", name, value));
}

inline void check_costs(const LinkCosts& costs) {
  check_cost(costs.alpha_intra, "alpha_intra");
  check_cost(costs.beta_intra, "beta_intra");
  check_cost(costs.alpha_inter, "alpha_inter");
  check_cost(costs.beta_inter, "beta_inter");
}

// The node-shaped closed forms' argument checks for m nodes of g members.
inline void check_node_shape(std::string_view algorithm, int g, int m, double bytes, const LinkCosts& costs) {
  if (g < 2 || m < 2)
    fail(fmt::format("{} needs at least 2 nodes with at least 2 members each (got {} of {})", algorithm, m, g));
  check_group_size(static_cast<long long>(g) * m);
  check_bytes(bytes);
  check_costs(costs);
}

// ---------------------------------------------------------------------------------------------
// Phase building blocks. Members are indices into the group; a "ring" or "chain" is a list of them.

inline SchedulePhase make_phase(std::string label, int latency_steps) {
  SchedulePhase phase;
  phase.label = std::move(label);
  phase.latency_steps = latency_steps;
  return phase;
}

inline void add_flow(SchedulePhase& phase, int src, int dst, double bytes) {
  // A zero-byte flow would still cost a route latency in SimGrid, which no algorithm pays for.
  if (bytes > 0) phase.flows.push_back({src, dst, bytes});
}

// Phases that ended up without flows (a fold with no extra members) are dropped rather than kept
// as empty phases, so every phase of a schedule moves data.
inline void append(Schedule& schedule, SchedulePhase phase) {
  if (!phase.flows.empty()) schedule.phases.push_back(std::move(phase));
}

inline void add_ring(SchedulePhase& phase, const std::vector<int>& ring, double bytes) {
  const int size = static_cast<int>(ring.size());
  if (size < 2) return;
  for (int i = 0; i < size; ++i) add_flow(phase, ring[i], ring[(i + 1) % size], bytes);
}

// One phase of `steps` latency steps: a ring over each member list at once, `bytes` per flow.
inline SchedulePhase rings_phase(std::string label, int steps, const std::vector<std::vector<int>>& rings,
                                 double bytes) {
  SchedulePhase phase = make_phase(std::move(label), steps);
  for (const auto& ring : rings) add_ring(phase, ring, bytes);
  return phase;
}

inline void add_chain(SchedulePhase& phase, const std::vector<int>& chain, double bytes) {
  for (std::size_t i = 0; i + 1 < chain.size(); ++i) add_flow(phase, chain[i], chain[i + 1], bytes);
}

inline void add_all_pairs(SchedulePhase& phase, const std::vector<int>& group, double bytes) {
  for (int src : group)
    for (int dst : group)
      if (src != dst) add_flow(phase, src, dst, bytes);
}

inline std::vector<int> identity_members(int p) {
  std::vector<int> members(p);
  std::iota(members.begin(), members.end(), 0);
  return members;
}

// Bytes each member sends around a ring of `size` members for the reduce-scatter or all-gather
// of `bytes` (size-1 chunks of bytes/size).
inline double ring_pass_bytes(int size, double bytes) { return (size - 1) * (bytes / size); }

// The largest chunk a tree pipeline across nodes keeps (Schedule::chunk_limit): half the shard
// n/g each rail carries.
inline double tree_chunk_limit(int g, double bytes) { return bytes / g / 2; }
// NVLSTree's share of the protocol's pipeline chunk on m nodes: NCCL caps its chunk at
// nvlsTreeMaxChunkSize, which is its 128 KiB NVLS chunk on 2 and 3 nodes and 64 KiB from 4
// (src/transport/nvls.cc, ncclNvlsTuning; src/enqueue.cc), so from 4 nodes a link moves half.
inline double nvls_tree_chunk_fraction(int m) { return m >= 4 ? 0.5 : 1.0; }

// A group's members by node (hierarchical.cpp builds it; the selector reads the shape).
struct NodeLayout {
  std::vector<std::vector<int>> nodes;  // nodes[j][l]: member at local index l of node j
  bool even = true;                     // every node holds the same number of members
  int g() const { return static_cast<int>(nodes.front().size()); }
  int m() const { return static_cast<int>(nodes.size()); }
  bool hierarchical() const { return even && g() >= 2 && m() >= 2; }

  std::vector<std::vector<int>> rails() const {
    std::vector<std::vector<int>> rails(g());
    for (const auto& node : nodes)
      for (int l = 0; l < g(); ++l) rails[l].push_back(node[l]);
    return rails;
  }
};

// Nodes in order of first appearance; a member's local index is its order within its node.
NodeLayout node_layout(const std::vector<int>& member_nodes);
// Whether the selector offers `algorithm` for `kind` on a group of this layout (selection.cpp): the
// shape it needs (hierarchical and nvls_tree across even nodes, nvls and the chain inside one),
// NVLS only where the switches reduce (costs), NCCL's tree as the chain inside a node (from 3
// members) and the double binary tree across nodes, direct up to 64 members. The NCCL tuner's
// choice is made among the same.
bool offered(Algorithm algorithm, CollectiveKind kind, const NodeLayout& layout, const LinkCosts& costs);
// node_layout, or std::invalid_argument unless every node holds the same number (>= 2) of
// members and there are at least 2 nodes (the message names `algorithm`).
NodeLayout require_hierarchical_layout(const std::vector<int>& member_nodes, std::string_view algorithm);

// ---------------------------------------------------------------------------------------------
// Each algorithm: its schedule for a group of p members (p >= 2, bytes > 0), and its closed form on
// a uniform platform (alpha a, beta b), which must agree phase by phase.

// ring.cpp. `full`: the size of the group a folded schedule stands for (p when not folded).
// Across nodes (an even layout of g >= 2 members on m >= 2 nodes) all-reduce, all-gather and
// reduce-scatter run a channel per NIC: a ring per node and a ring per rail at once.
Schedule ring_schedule(CollectiveKind kind, const std::vector<int>& member_nodes, double bytes, int full);
double ring_closed_form(CollectiveKind kind, int p, double n, double a, double b);

// tree.cpp: double binary tree all-reduce (foldable: `full` as for rings), binomial broadcast.
// NCCL's double binary tree over p members: a member's parent in tree 0 or 1 (-1 at the root), the
// deeper tree's depth in edges, and how many half-buffer flows the busiest member sends (and
// receives) over an all-reduce's reduce and broadcast: 2 for p = 2, 3 for p = 3, 4 from 4.
int dtree_parent(int tree, int rank, int p);
int dtree_depth(int p);
int dtree_busiest_flows(int p);
Schedule tree_all_reduce(int p, double bytes, int full);
Schedule tree_schedule(CollectiveKind kind, int p, double bytes);
double tree_closed_form(CollectiveKind kind, int p, double n, double a, double b);

// chain.cpp: NCCL's tree all-reduce inside one node, a pipelined chain of the p members.
Schedule chain_schedule(int p, double bytes);
double chain_closed_form(int p, double n, double a, double b);

// rhd.cpp: recursive halving / doubling, van de Geijn broadcast, Bruck all-to-all.
Schedule rhd_schedule(CollectiveKind kind, int p, double bytes);
double rhd_closed_form(CollectiveKind kind, int p, double n, double a, double b);

// direct.cpp: every member to every other member in one step.
Schedule direct_schedule(CollectiveKind kind, int p, double bytes);
Schedule nvls_schedule(int p, double bytes);  // all-reduce on one node (check_fits checked it)
double nvls_pair_bytes(int p, double n);      // each member's flow to each other member
double nvls_closed_form(int p, double n, double a, double b);
double direct_closed_form(CollectiveKind kind, int p, double n, double a, double b);

// hierarchical.cpp: intra-node rings and inter-node rails. `full_m`: the node count of the group a
// folded schedule stands for. Its closed form is public (hierarchical_closed_form_time).
Schedule hierarchical_schedule(CollectiveKind kind, const NodeLayout& layout, double bytes, int full_m);
// NVLSTree all-reduce on the same layout (folds the same way).
Schedule nvls_tree_schedule(const NodeLayout& layout, double bytes, int full_m);

}  // namespace stratsim::sim::collectives
