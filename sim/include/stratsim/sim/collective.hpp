// Collective algorithms as traffic schedules. A schedule is a sequence of phases; a phase is a
// set of concurrent flows between group members plus the number of latency steps (alpha terms)
// it stands for. The simulator starts a phase's flows together as SimGrid comms, waits for all,
// then adds (latency_steps - 1) * alpha of that phase, since SimGrid already charged one route
// latency per flow. On an idle uniform platform that reproduces the alpha-beta closed forms of
// simulators.md section 5 exactly; under load the flows contend like any other traffic.
//
// Byte conventions follow nccl-tests: n is the all-reduce buffer, the all-gather output, the
// reduce-scatter input, the broadcast buffer, and the bytes each rank sends in all-to-all.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stratsim/core/program.hpp"

namespace stratsim::sim {

// nvls_tree is NCCL's NVLSTree: NVLS inside each node, the rails' double binary trees across nodes.
// chain is NCCL's tree all-reduce inside one node: a chain of the node's members (chain.cpp).
enum class Algorithm {
  automatic,
  ring,
  tree,
  recursive_halving_doubling,
  direct,
  hierarchical,
  nvls,
  nvls_tree,
  chain
};

// "ring", "tree", "rhd", "direct", "hierarchical", "nvls", "nvls_tree", "chain", "auto"
std::string_view algorithm_name(Algorithm algorithm);
std::optional<Algorithm> parse_algorithm(std::string_view text);

struct Flow {
  int src = 0;  // index into the group's member list
  int dst = 0;
  double bytes = 0;
};

struct SchedulePhase {
  std::string label;  // "ring", "intra reduce-scatter", "step 3"
  std::vector<Flow> flows;
  int latency_steps = 1;  // alpha terms this phase represents (>= 1 when it has flows)
  // NVLink SHARP traffic (the switch reduces or multicasts): its flows move at the share of the
  // link NVLS achieves (NetworkModel::nvls_bandwidth_fraction), not the protocol's, and its steps
  // are in NVLS's own launch latency rather than the protocol's per-step latency.
  bool nvls = false;
};

struct Schedule {
  core::CollectiveKind kind = core::CollectiveKind::all_reduce;
  Algorithm algorithm = Algorithm::ring;
  std::vector<SchedulePhase> phases;
  // The phases run as one pipeline: chunks of every phase are in flight at once (NCCL's tree moves
  // a buffer's chunks through a node's chain and across the nodes together), so their flows run
  // together, and the pipeline fills phase by phase (each phase's latency steps but the first of
  // each link class are paid after the flows). False: one phase after another.
  bool pipelined = false;
  // A chunk pipeline (NCCL's trees): a chunk crosses the hops of its phases one after another (each
  // latency step a hop), so past the busiest hop every hop adds one chunk's crossing to the time
  // (estimate_parts' fill). The largest chunk the collective's size allows: half the bytes each
  // member sends over one hop, since NCCL shrinks its chunks to keep several in flight. 0: no fill
  // (rings: every link is busy every step).
  double chunk_limit = 0;
  // The share of the protocol's pipeline chunk this pipeline moves (NVLSTree from 4 nodes: half).
  double chunk_fraction = 1;
};

// member_nodes[i]: the node of member i (members in group order). Throws std::invalid_argument
// when the algorithm does not implement the collective (tree has all_reduce and broadcast only).
Schedule build_schedule(core::CollectiveKind kind, Algorithm algorithm, const std::vector<int>& member_nodes,
                        double bytes);
bool implements(Algorithm algorithm, core::CollectiveKind kind);
// std::invalid_argument saying why, unless `algorithm` (concrete) runs `kind` on a group of this
// shape: hierarchical and nvls_tree need at least 2 nodes of the same number (>= 2) of members,
// nvls one node. What build_schedule checks, without building anything.
void check_fits(core::CollectiveKind kind, Algorithm algorithm, const std::vector<int>& member_nodes);

// Folding (rank symmetry across nodes, see simulator.hpp): a group of full_size members is
// simulated on its first member_nodes.size() members, which stand for all of them; member i of the
// full group maps to simulated member i mod member_nodes.size(). Rings (across nodes, the rails
// of their channels), pipelined chains and hierarchical rails close over the simulated members and
// keep the full group's chunk sizes and latency steps, so every simulated member sends and
// receives exactly what it would in the full group; the double binary tree spans the simulated
// members with the full trees' depth (each member keeps its one parent and at most two children
// per tree, so its traffic is unchanged too). Direct, rhd, binomial broadcast and all-to-all reach
// members at every distance and do not fold.
bool folds(core::CollectiveKind kind, Algorithm algorithm);
// The folded schedule; equals build_schedule when full_size == member_nodes.size(). Throws
// std::invalid_argument when the algorithm does not fold or full_size is not a multiple.
Schedule build_folded_schedule(core::CollectiveKind kind, Algorithm algorithm, const std::vector<int>& member_nodes,
                               int full_size, double bytes);

// Alpha-beta link costs the selector and the closed forms use: intra-node and inter-node.
struct LinkCosts {
  double alpha_intra = 0, beta_intra = 0;  // seconds, seconds per byte
  double alpha_inter = 0, beta_inter = 0;
  // In-switch reduction (NVLS, all-reduce inside a node): its launch latency (before the routes'
  // own) and seconds per byte on a GPU's link, alone and inside NVLSTree; nvls_beta = 0 when the
  // platform's switches cannot reduce.
  double nvls_launch = 0, nvls_beta = 0, nvls_tree_beta = 0;
  double nvls_tree_launch = 0;
  // NVLS's first loop (NetworkModel::nvls_first_loop_fraction): that share of up to that many bytes
  // moves again at nvls_beta, since the reduce and multicast halves do not overlap there.
  double nvls_first_loop_fraction = 0, nvls_first_loop_bytes = 0;
};

// The seconds NVLS adds for its first loop on p members of one node (0 when the costs have none):
// first_loop_fraction x min(bytes, first_loop_bytes), moved as NVLS moves it, (p+1)/p of it on
// every member's link.
double nvls_first_loop_seconds(int p, double bytes, const LinkCosts& costs);

// Closed-form time on a uniform platform (every member pair alpha, beta; each member sends and
// receives over its own link): the formulas of simulators.md section 5.
double closed_form_time(core::CollectiveKind kind, Algorithm algorithm, int p, double bytes, double alpha, double beta);
// Hierarchical closed form: m nodes of g members each, intra (alpha_i, beta_i), inter (alpha_e,
// beta_e) with the g per-node shards travelling over g NICs in parallel.
double hierarchical_closed_form_time(core::CollectiveKind kind, int g, int m, double bytes, const LinkCosts& costs);
// The ring across nodes on the same shape (all_reduce, all_gather, reduce_scatter): g channels,
// each leaving every node on its own rail, so the ring's bytes cross the nodes over g NICs at once.
double ring_across_nodes_closed_form_time(core::CollectiveKind kind, int g, int m, double bytes,
                                          const LinkCosts& costs);
// NVLSTree all-reduce on the same shape: NVLS inside the nodes (costs.nvls_tree_beta), the rails' trees
// across them; the route latencies only (its launch, costs.nvls_tree_launch, is not included).
double nvls_tree_closed_form_time(int g, int m, double bytes, const LinkCosts& costs);

// Estimated idle-platform time of a schedule: for each phase, latency_steps * alpha plus the
// largest per-member egress or ingress bytes times beta (intra or inter by the flow's nodes;
// nvls_beta for an NVLS phase's flows).
double estimate_time(const Schedule& schedule, const std::vector<int>& member_nodes, const LinkCosts& costs);
// The same estimate in its parts: route latency (sum of latency_steps x alpha), the latency
// steps inside nodes and between them, and transfer time (latency + bandwidth = estimate_time). Protocol choice
// (cost_model.hpp) weighs them differently.
struct ScheduleCost {
  double latency = 0;
  int intra_steps = 0;  // latency steps of phases whose flows all stay inside a node (NVLS phases not counted)
  int inter_steps = 0;  // latency steps of phases with a flow between nodes
  double bandwidth = 0;
  // A chunk pipeline's fill (Schedule::chunk_limit > 0), in seconds per byte of chunk: one byte's
  // crossing of every hop of its phases but the slowest (NVLS phases not counted: their fill is in
  // NVLS's launch latency). The protocol's pipeline chunk, up to chunk_limit, times this.
  double fill = 0;
  double chunk_limit = 0;
  double chunk_fraction = 1;
};
ScheduleCost estimate_parts(const Schedule& schedule, const std::vector<int>& member_nodes, const LinkCosts& costs);
// ScheduleCost::fill of a chunk pipeline (0 for any other schedule).
double chunk_fill(const Schedule& schedule, const std::vector<int>& member_nodes, const LinkCosts& costs);

// NCCL-like default: among the algorithms NCCL would run for `kind` (all_reduce: ring, tree,
// hierarchical, nvls, nvls_tree; broadcast, all_gather and reduce_scatter: ring, hierarchical; all_to_all: ring,
// hierarchical, direct up to 64 members) and that fit the group shape, the one with the lowest
// estimate_time (ties in that order). rhd is never chosen automatically. Deterministic.
// With a network cost model that has protocols (cost_model.hpp), each candidate is priced with the
// protocol NCCL would pair it with; when costs.nvls_beta > 0, nvls is a candidate for all-reduce
// inside one node and nvls_tree across nodes (both at NVLS's launch latency, nvls_tree's tree
// under the Simple protocol, the only one NCCL runs NVLS algorithms with).
struct NetworkModel;
Algorithm select_algorithm(core::CollectiveKind kind, const std::vector<int>& member_nodes, double bytes,
                           const LinkCosts& costs, const NetworkModel* network = nullptr);

}  // namespace stratsim::sim
