// Hierarchical: rings inside each node over NVLink, and across nodes one double binary tree per
// rail (the members with the same local index), so the g shards of a node cross the inter-node
// fabric over g NICs in parallel (simulators.md section 5, invariant 2). All-reduce is NCCL's tree
// as it runs across nodes: an intra-node reduce-scatter, an all-reduce of n/g per rail over NCCL's
// double binary tree of the nodes, and an intra-node all-gather, pipelined (chunks of all stages in
// flight at once): 2 (g-1)/g n per member moves at NVLink speed while the busiest node of the
// trees moves n/g (2 nodes), 1.5 n/g (3) or 2 n/g (4 and more) through its NIC, so the slower of
// the two decides, and across nodes that is the NICs. (Run one after another, the three would cap
// 16 H100s on two nodes with 25 GB/s NICs at 211 GB/s busbw; nccl-tests measured 339, above the
// 200 a ring through the same NICs reaches. From 4 nodes the tree's 2 n/g caps 8 x 400 Gb/s NICs
// at about 380 GB/s busbw, as nccl-tests measured on two clusters where a ring per rail would
// allow 500: benchmarks/README.md, "Across nodes".) All-gather gathers across nodes first (so the
// fast intra-node step moves the bulk), reduce-scatter the reverse; broadcast chains across nodes
// on the root's rail, then inside each node; all-to-all is rail-aligned (PXN-like) in two steps.
//
// NVLSTree (nvls_tree) is the all-reduce NCCL runs across nodes whose NVSwitches reduce (H100 and
// later): the rails' trees are the same, but inside each node the switch reduces and multicasts
// (nvls.cpp), so each GPU's NVLink carries n (1 + 1/g) at NVLS's rate instead of a ring's
// 2 (g-1)/g n. With 8 x 400 Gb/s NICs on 2 nodes the NICs have room to spare and NVLS's rate
// decides: 469 GB/s busbw measured on 16 H100s, near one node's 480 (benchmarks/README.md).

#include "common.hpp"

#include <algorithm>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace stratsim::sim::collectives {

using core::CollectiveKind;

// Nodes in order of first appearance; a member's local index is its order within its node.
NodeLayout node_layout(const std::vector<int>& member_nodes) {
  NodeLayout layout;
  std::unordered_map<int, int> index;
  for (int i = 0; i < static_cast<int>(member_nodes.size()); ++i) {
    auto [it, inserted] = index.emplace(member_nodes[i], static_cast<int>(layout.nodes.size()));
    if (inserted) layout.nodes.emplace_back();
    layout.nodes[it->second].push_back(i);
  }
  for (const auto& node : layout.nodes) layout.even = layout.even && node.size() == layout.nodes.front().size();
  return layout;
}

NodeLayout require_hierarchical_layout(const std::vector<int>& member_nodes, std::string_view algorithm) {
  NodeLayout layout = node_layout(member_nodes);
  if (!layout.even) {
    fail(
        fmt::format("{} needs the same number of members on every node; the first node has {}, but node "
                    "sizes differ across the {} nodes",
                    algorithm, layout.g(), layout.m()));
  }
  if (!layout.hierarchical()) {
    fail(fmt::format("{} needs at least 2 nodes with at least 2 members each (got {} node(s) of {})", algorithm,
                     layout.m(), layout.g()));
  }
  return layout;
}

namespace {

SchedulePhase groups_all_pairs_phase(std::string label, const std::vector<std::vector<int>>& groups, double bytes) {
  SchedulePhase phase = make_phase(std::move(label), 1);
  for (const auto& group : groups) add_all_pairs(phase, group, bytes);
  return phase;
}

// All-reduce across nodes: on each rail, NCCL's double binary tree of the nodes reduces the rail's
// shard up (each tree half of it) and broadcasts it down, each phase as deep as the full trees.
// Folded (full_m > the simulated nodes), a rail closes into a ring whose members each carry what
// the busiest node of the full trees does, so that every simulated member's NIC is as loaded.
void append_rail_trees(Schedule& schedule, const NodeLayout& layout, double shard, int full_m) {
  const int m = layout.m(), depth = dtree_depth(full_m);
  SchedulePhase reduce = make_phase("inter tree reduce", depth);
  SchedulePhase broadcast = make_phase("inter tree broadcast", depth);
  const double folded_per_phase = full_m > m ? dtree_busiest_flows(full_m) * (shard / 2) / 2 : 0;
  for (const auto& rail : layout.rails()) {
    if (full_m > m) {
      add_ring(reduce, rail, folded_per_phase);
      add_ring(broadcast, rail, folded_per_phase);
      continue;
    }
    for (int tree = 0; tree < 2; ++tree)
      for (int node = 0; node < m; ++node)
        if (const int parent = dtree_parent(tree, node, m); parent >= 0) {
          add_flow(reduce, rail[node], rail[parent], shard / 2);
          add_flow(broadcast, rail[parent], rail[node], shard / 2);
        }
  }
  append(schedule, std::move(reduce));
  append(schedule, std::move(broadcast));
}

// One half of NVLS inside every node, all pairs of a node at once: the reduce (each member's
// buffer into the switch, its shard reduced back out) or the multicast (its shard out, the whole
// reduced buffer in); together n (1 + 1/g) each way on every member's link, as nvls.cpp explains.
SchedulePhase nvls_half_phase(std::string label, const NodeLayout& layout, double bytes) {
  SchedulePhase phase = make_phase(std::move(label), 1);
  phase.nvls = true;
  for (const auto& node : layout.nodes) add_all_pairs(phase, node, nvls_pair_bytes(layout.g(), bytes) / 2);
  return phase;
}

}  // namespace

Schedule nvls_tree_schedule(const NodeLayout& layout, double bytes, int full_m) {
  Schedule schedule;
  append(schedule, nvls_half_phase("intra nvls reduce", layout, bytes));
  append_rail_trees(schedule, layout, bytes / layout.g(), full_m);
  append(schedule, nvls_half_phase("intra nvls multicast", layout, bytes));
  schedule.pipelined = true;  // as NCCL's tree: chunks of every stage in flight at once
  schedule.chunk_limit = tree_chunk_limit(layout.g(), bytes);
  schedule.chunk_fraction = nvls_tree_chunk_fraction(full_m);
  return schedule;
}

// `full_m` is the node count of the group the schedule stands for: folded, the rails close over
// the simulated nodes but carry the full rails' chunks for their latency steps.
Schedule hierarchical_schedule(CollectiveKind kind, const NodeLayout& layout, double bytes, int full_m) {
  Schedule schedule;
  const int g = layout.g(), m = full_m;
  const auto rails = layout.rails();
  const double shard = bytes / g;  // what each rail carries across nodes
  switch (kind) {
    case CollectiveKind::all_reduce:
      append(schedule, rings_phase("intra reduce-scatter", g - 1, layout.nodes, ring_pass_bytes(g, bytes)));
      append_rail_trees(schedule, layout, shard, m);
      append(schedule, rings_phase("intra all-gather", g - 1, layout.nodes, ring_pass_bytes(g, bytes)));
      schedule.pipelined = true;
      schedule.chunk_limit = tree_chunk_limit(g, bytes);  // NCCL's tree: a chain per node, trees across
      break;
    case CollectiveKind::all_gather:
      // Gather each rail's shard across nodes first, so the fast intra-node step moves the bulk.
      append(schedule, rings_phase("inter all-gather", m - 1, rails, ring_pass_bytes(m, shard)));
      append(schedule, rings_phase("intra all-gather", g - 1, layout.nodes, ring_pass_bytes(g, bytes)));
      break;
    case CollectiveKind::reduce_scatter:
      append(schedule, rings_phase("intra reduce-scatter", g - 1, layout.nodes, ring_pass_bytes(g, bytes)));
      append(schedule, rings_phase("inter reduce-scatter", m - 1, rails, ring_pass_bytes(m, shard)));
      break;
    case CollectiveKind::broadcast: {
      // Root is member 0, local index 0: chain across nodes on its rail, then a chain per node.
      SchedulePhase inter = make_phase("inter broadcast", m - 1);
      if (m > layout.m()) add_ring(inter, rails.front(), bytes);
      else add_chain(inter, rails.front(), bytes);
      append(schedule, std::move(inter));
      SchedulePhase intra = make_phase("intra broadcast", g - 1);
      for (const auto& node : layout.nodes) add_chain(intra, node, bytes);
      append(schedule, std::move(intra));
      break;
    }
    case CollectiveKind::all_to_all:
      // Rail-aligned (PXN-like): first hand each block to the local member on the destination's
      // rail (n/g per peer: the m blocks for that local index), then each rail exchanges across
      // nodes (n/m per peer: the g blocks its node holds for that node's member).
      append(schedule, groups_all_pairs_phase("intra all-to-all", layout.nodes, bytes / g));
      append(schedule, groups_all_pairs_phase("inter all-to-all", rails, bytes / m));
      break;
    case CollectiveKind::scatter:
      collectives::fail("a scatter runs direct only (implements() refuses the rest)");
  }
  return schedule;
}

}  // namespace stratsim::sim::collectives

namespace stratsim::sim {

using namespace collectives;

namespace {

// A node stage (its first latency and its transfer) pipelined beside the rails' double binary trees
// carrying `shard`: the trees' other latency steps fill the pipeline, and the slower of the two
// decides (the busiest node sends f half shards through its NIC).
double beside_rail_trees(double node_stage, int m, double shard, const LinkCosts& costs) {
  return 2 * (dtree_depth(m) - 1) * costs.alpha_inter +
         std::max(node_stage, costs.alpha_inter + dtree_busiest_flows(m) * (shard / 2) * costs.beta_inter);
}

}  // namespace

// With shard = n/g:
//   all_reduce      2(g-2)a_i + 2(D-1)a_e + max(a_i + 2(g-1)/g n b_i, a_e + f/2 shard b_e)
//                   (pipelined: the NVLink and NIC transfers at once, each flow paying its route's
//                   latency once; the rest of each stage's steps fill the pipeline. D: the double
//                   binary tree's depth over m nodes, ceil(log2 m); f: the half-shard flows its
//                   busiest node sends, 2 for m = 2, 3 for m = 3, 4 from 4)
//   all_gather,     (g-1)a_i + (g-1)/g n b_i + (m-1)a_e + (m-1)/m shard b_e
//   reduce_scatter  (same terms, the other order)
//   broadcast       (m-1)a_e + n b_e + (g-1)a_i + n b_i          (two pipelined chains)
//   all_to_all      a_i + (g-1)/g n b_i + a_e + (m-1)/m n b_e     (rail-aligned, two steps)
double hierarchical_closed_form_time(CollectiveKind kind, int g, int m, double bytes, const LinkCosts& costs) {
  check_node_shape("hierarchical", g, m, bytes, costs);
  if (bytes == 0) return 0;
  const double n = bytes, shard = bytes / g;
  const double intra_pass = (g - 1) * costs.alpha_intra + ring_pass_bytes(g, n) * costs.beta_intra;
  const double inter_pass = (m - 1) * costs.alpha_inter + ring_pass_bytes(m, shard) * costs.beta_inter;
  switch (kind) {
    case CollectiveKind::all_reduce:
      return 2 * (g - 2) * costs.alpha_intra +
             beside_rail_trees(costs.alpha_intra + 2 * ring_pass_bytes(g, n) * costs.beta_intra, m, shard, costs);
    case CollectiveKind::all_gather:
    case CollectiveKind::reduce_scatter:
      return intra_pass + inter_pass;
    case CollectiveKind::broadcast:
      return (m - 1) * costs.alpha_inter + n * costs.beta_inter + (g - 1) * costs.alpha_intra + n * costs.beta_intra;
    case CollectiveKind::all_to_all:
      return costs.alpha_intra + (g - 1) * (n / g) * costs.beta_intra + costs.alpha_inter +
             (m - 1) * (n / m) * costs.beta_inter;
    case CollectiveKind::scatter:
      collectives::fail("a scatter runs direct only (implements() refuses the rest)");
  }
  return 0;
}

// The pipelined estimate of nvls_tree_schedule: the NVLS halves (one latency step each, n (1 + 1/g)
// on a member's link at nvls_tree_beta) beside the rails' trees, as in the all-reduce above.
double nvls_tree_closed_form_time(int g, int m, double bytes, const LinkCosts& costs) {
  check_node_shape("nvls_tree", g, m, bytes, costs);
  check_cost(costs.nvls_tree_beta, "nvls_tree_beta");
  if (bytes == 0) return 0;
  return beside_rail_trees(costs.alpha_intra + bytes * (g + 1) / g * costs.nvls_tree_beta, m, bytes / g, costs);
}

}  // namespace stratsim::sim
