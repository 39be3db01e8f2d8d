// Choosing an algorithm the way NCCL would: among the algorithms NCCL runs for a collective and
// that fit the group's shape, the one with the lowest idle-platform alpha-beta estimate, with
// alpha and beta read off the built platform. estimate_time() evaluates a schedule phase by phase
// (each phase's largest alpha and its busiest member's bytes, intra or inter per flow), so the
// selector weighs the real mix of NVLink and network hops of a group, not a uniform figure.

#include "common.hpp"

#include "stratsim/sim/cost_model.hpp"

#include <algorithm>
#include <limits>
#include <vector>

namespace stratsim::sim {

using namespace collectives;

namespace {

// Direct schedules hold p(p-1) flows per phase; beyond this the selector does not consider them
// (building and simulating them would dominate the run, and NCCL has no such algorithm either).
constexpr int kDirectMaxMembers = 64;
// Two candidate times closer than this (relative) are a tie, resolved by the documented order,
// so that the choice does not hinge on the last bit of two summation orders.
constexpr double kTieTolerance = 1e-12;

// counts[k]: members i whose member (i+k) mod p sits on the same node. O(sum of node sizes^2).
std::vector<int> same_node_offsets(const std::vector<int>& member_nodes) {
  const int p = static_cast<int>(member_nodes.size());
  const NodeLayout layout = node_layout(member_nodes);
  std::vector<int> counts(p, 0);
  if (layout.m() == 1) return std::vector<int>(p, p);
  for (const auto& node : layout.nodes)
    for (int src : node)
      for (int dst : node)
        if (src != dst) ++counts[(dst - src + p) % p];
  return counts;
}

// estimate_time of the pairwise all-to-all without building its p(p-1) flows: step k is a
// permutation of equal flows, so it costs the largest alpha plus n/p times the largest beta
// among its flows, and whether those are intra, inter or both depends only on the offset k.
double ring_all_to_all_estimate(const std::vector<int>& member_nodes, double bytes, const LinkCosts& costs) {
  const int p = static_cast<int>(member_nodes.size());
  const std::vector<int> same_node = same_node_offsets(member_nodes);
  const double block = bytes / p;
  double total = 0;
  for (int k = 1; k < p; ++k) {
    const bool intra = same_node[k] > 0, inter = same_node[k] < p;
    const double alpha = std::max(intra ? costs.alpha_intra : 0.0, inter ? costs.alpha_inter : 0.0);
    const double beta = std::max(intra ? costs.beta_intra : 0.0, inter ? costs.beta_inter : 0.0);
    total += alpha + block * beta;
  }
  return total;
}

// Idle-platform time of one candidate. Under a cost model with protocols each candidate is priced
// with the protocol NCCL would pair it with (cost_model.hpp choose_protocol), so that an algorithm
// with few, fast steps (NVLS) is weighed against rings that pay their protocol's latency too.
// NVLSTree: NVLS's launch, then its closed form under the Simple protocol (nvls_protocol):
// Simple's share of the links and its step latency for the trees' 2 ceil(log2 m) steps across
// nodes, NVLS's own rate for the NVLS halves (whose steps are in the launch). Its phases are
// all-intra or all-inter, so the closed form is its estimate, without building p g flows.
// The trees' chunks fill the pipeline as chunk_fill says: 2 ceil(log2 m) hops across nodes, the
// busiest one not counted.
double nvls_tree_time(const NodeLayout& layout, double bytes, const LinkCosts& costs, const NetworkModel* network) {
  const Protocol* simple = network ? nvls_protocol(*network) : nullptr;
  LinkCosts under_protocol = costs;
  double steps = 0, fill = 0;
  if (simple) {
    under_protocol.beta_intra /= simple->bandwidth_fraction;
    under_protocol.beta_inter /= simple->bandwidth_fraction;
    steps = 2 * dtree_depth(layout.m()) * simple->step_latency_inter;
    fill = fill_chunk(*simple, tree_chunk_limit(layout.g(), bytes), nvls_tree_chunk_fraction(layout.m())) *
           (2 * dtree_depth(layout.m()) - 1) * under_protocol.beta_inter;
  }
  return costs.nvls_tree_launch + nvls_tree_closed_form_time(layout.g(), layout.m(), bytes, under_protocol) + steps +
         fill;
}

double candidate_time(CollectiveKind kind, Algorithm algorithm, const std::vector<int>& member_nodes,
                      const NodeLayout& layout, double bytes, const LinkCosts& costs, const NetworkModel* network) {
  if (algorithm == Algorithm::nvls)
    return costs.nvls_launch + 2 * costs.alpha_intra + bytes * (layout.g() + 1) / layout.g() * costs.nvls_beta +
           nvls_first_loop_seconds(layout.g(), bytes, costs);
  if (algorithm == Algorithm::nvls_tree) return nvls_tree_time(layout, bytes, costs, network);
  if (network && !network->protocols.empty()) {
    ScheduleCost parts;
    if (algorithm == Algorithm::ring && kind == CollectiveKind::all_to_all) {
      // Its p - 1 permutation steps without building p(p-1) flows (the latency is inside).
      parts.bandwidth = ring_all_to_all_estimate(member_nodes, bytes, costs);
      (layout.m() > 1 ? parts.inter_steps : parts.intra_steps) = static_cast<int>(member_nodes.size()) - 1;
    } else {
      parts = estimate_parts(build_schedule(kind, algorithm, member_nodes, bytes), member_nodes, costs);
    }
    return protocol_time(*choose_protocol(*network, bytes, parts), parts);
  }
  // Hierarchical phases are all-intra or all-inter, so its estimate is its closed form.
  if (algorithm == Algorithm::hierarchical)
    return hierarchical_closed_form_time(kind, layout.g(), layout.m(), bytes, costs);
  if (algorithm == Algorithm::ring && kind == CollectiveKind::all_to_all)
    return ring_all_to_all_estimate(member_nodes, bytes, costs);
  return estimate_time(build_schedule(kind, algorithm, member_nodes, bytes), member_nodes, costs);
}

// What NCCL itself would consider: rings (across nodes, a channel per NIC) and double binary trees
// for reductions (inside one node NCCL's tree is a chain: chain.cpp), rings for all-gather and reduce-scatter,
// point-to-point for all-to-all; hierarchical stands for NCCL's tree across nodes and for its PXN all-to-all. Pure
// alpha-beta would otherwise pick recursive halving-doubling or direct at every size (they have ring's bandwidth term
// with fewer latency terms), which NCCL never runs; they stay available by name.
std::vector<Algorithm> nccl_candidates(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_reduce:
      return {Algorithm::ring,         Algorithm::tree, Algorithm::chain,
              Algorithm::hierarchical, Algorithm::nvls, Algorithm::nvls_tree};
    case CollectiveKind::broadcast:  // NCCL broadcasts over rings only (trees are all-reduce's)
    case CollectiveKind::all_gather:
    case CollectiveKind::reduce_scatter:
      return {Algorithm::ring, Algorithm::hierarchical};
    case CollectiveKind::all_to_all:
      return {Algorithm::ring, Algorithm::hierarchical, Algorithm::direct};
    case CollectiveKind::scatter:
      return {Algorithm::direct};
  }
  return {Algorithm::ring};
}

}  // namespace

namespace collectives {

bool offered(Algorithm algorithm, CollectiveKind kind, const NodeLayout& layout, const LinkCosts& costs) {
  int p = 0;
  for (const auto& node : layout.nodes) p += static_cast<int>(node.size());
  if (!implements(algorithm, kind)) return false;
  if (algorithm == Algorithm::direct && p > kDirectMaxMembers) return false;
  if (algorithm == Algorithm::hierarchical && !layout.hierarchical()) return false;
  // NCCL's tree is the chain inside one node and the double binary tree across nodes. A chain of
  // two moves what the ring does over the same link, one route latency sooner by the pipeline's
  // count; NCCL's tuner halves a tree's bandwidth and runs the ring at every size there.
  if (algorithm == (layout.m() == 1 ? Algorithm::tree : Algorithm::chain)) return false;
  if (algorithm == Algorithm::chain && p < 3) return false;
  if (algorithm == Algorithm::nvls) return costs.nvls_beta > 0 && layout.m() == 1;
  if (algorithm == Algorithm::nvls_tree) return costs.nvls_tree_beta > 0 && layout.hierarchical();
  return true;
}

}  // namespace collectives

double estimate_time(const Schedule& schedule, const std::vector<int>& member_nodes, const LinkCosts& costs) {
  const ScheduleCost cost = estimate_parts(schedule, member_nodes, costs);
  return cost.latency + cost.bandwidth;
}

namespace {

// The link class a flow of the phase uses: 0 inside a node (NVLink), 1 across nodes (its NIC).
int link_class(const SchedulePhase& phase, const Flow& flow, const std::vector<int>& member_nodes) {
  const int p = static_cast<int>(member_nodes.size());
  if (flow.src < 0 || flow.src >= p || flow.dst < 0 || flow.dst >= p)
    fail(fmt::format("phase '{}' has a flow {} -> {} outside the group of {}", phase.label, flow.src, flow.dst, p));
  return member_nodes[flow.src] == member_nodes[flow.dst] ? 0 : 1;
}

// One pass over a phase's flows, `on_flow(flow, link class, seconds per byte)` for each: the
// phase's alpha (its slowest class's) and its latency steps counted inside or between nodes (an
// NVLS phase's are in NVLS's launch latency instead). Both estimates walk phases this way; they
// differ in how they add the flows up.
template <class OnFlow>
double walk_phase(const SchedulePhase& phase, const std::vector<int>& member_nodes, const LinkCosts& costs,
                  ScheduleCost& total, OnFlow&& on_flow) {
  const double alpha[2] = {costs.alpha_intra, costs.alpha_inter};
  const double beta[2] = {phase.nvls && costs.nvls_beta > 0 ? costs.nvls_beta : costs.beta_intra, costs.beta_inter};
  double phase_alpha = 0;
  bool crosses_nodes = false;
  for (const Flow& flow : phase.flows) {
    const int c = link_class(phase, flow, member_nodes);
    crosses_nodes = crosses_nodes || c == 1;
    phase_alpha = std::max(phase_alpha, alpha[c]);
    on_flow(flow, c, beta[c]);
  }
  if (!phase.flows.empty() && !phase.nvls)
    (crosses_nodes ? total.inter_steps : total.intra_steps) += phase.latency_steps;
  return phase_alpha;
}

// A pipelined schedule (Schedule::pipelined): every phase's flows at once, so each member's links
// of one class (NVLink inside a node, its NIC across) carry all its flows of that class; the class
// that takes longer, its route latency included, decides, and each phase's other latency steps
// fill the pipeline.
ScheduleCost estimate_pipelined(const Schedule& schedule, const std::vector<int>& member_nodes,
                                const LinkCosts& costs) {
  const int p = static_cast<int>(member_nodes.size());
  std::vector<double> egress[2] = {std::vector<double>(p, 0.0), std::vector<double>(p, 0.0)};
  std::vector<double> ingress[2] = {egress[0], egress[0]};
  const double alpha[2] = {costs.alpha_intra, costs.alpha_inter};
  bool used[2] = {false, false};
  ScheduleCost total;
  for (const SchedulePhase& phase : schedule.phases) {
    const double phase_alpha = walk_phase(phase, member_nodes, costs, total, [&](const Flow& flow, int c, double beta) {
      used[c] = true;
      egress[c][flow.src] += flow.bytes * beta;
      ingress[c][flow.dst] += flow.bytes * beta;
    });
    if (!phase.flows.empty()) total.latency += (phase.latency_steps - 1) * phase_alpha;
  }
  double slowest = -1;
  int bottleneck = 0;
  for (int c = 0; c < 2; ++c) {
    if (!used[c]) continue;
    const double seconds = std::max(*std::max_element(egress[c].begin(), egress[c].end()),
                                    *std::max_element(ingress[c].begin(), ingress[c].end()));
    if (alpha[c] + seconds > slowest) slowest = alpha[c] + seconds, bottleneck = c, total.bandwidth = seconds;
  }
  if (slowest >= 0) total.latency += alpha[bottleneck];
  return total;
}

}  // namespace

double chunk_fill(const Schedule& schedule, const std::vector<int>& member_nodes, const LinkCosts& costs) {
  if (!(schedule.chunk_limit > 0)) return 0;
  double hops = 0, slowest = 0;
  for (const SchedulePhase& phase : schedule.phases) {
    if (phase.nvls || phase.flows.empty()) continue;
    const bool crosses =
        std::ranges::any_of(phase.flows, [&](const Flow& flow) { return link_class(phase, flow, member_nodes) == 1; });
    const double beta = crosses ? costs.beta_inter : costs.beta_intra;
    hops += phase.latency_steps * beta;
    slowest = std::max(slowest, beta);
  }
  return hops - slowest;
}

ScheduleCost estimate_parts(const Schedule& schedule, const std::vector<int>& member_nodes, const LinkCosts& costs) {
  check_costs(costs);
  if (schedule.pipelined) {
    ScheduleCost total = estimate_pipelined(schedule, member_nodes, costs);
    total.fill = chunk_fill(schedule, member_nodes, costs);
    total.chunk_limit = schedule.chunk_limit;
    total.chunk_fraction = schedule.chunk_fraction;
    return total;
  }
  const int p = static_cast<int>(member_nodes.size());
  std::vector<double> egress(p, 0.0), ingress(p, 0.0);
  std::vector<int> touched;
  ScheduleCost total;
  for (const SchedulePhase& phase : schedule.phases) {
    const double alpha = walk_phase(phase, member_nodes, costs, total, [&](const Flow& flow, int, double beta) {
      const double seconds = flow.bytes * beta;
      touched.push_back(flow.src);
      touched.push_back(flow.dst);
      egress[flow.src] += seconds;
      ingress[flow.dst] += seconds;
    });
    double bandwidth = 0;
    for (int member : touched) {
      bandwidth = std::max({bandwidth, egress[member], ingress[member]});
      egress[member] = ingress[member] = 0;
    }
    touched.clear();
    total.latency += phase.latency_steps * alpha;
    total.bandwidth += bandwidth;
  }
  return total;
}

Algorithm select_algorithm(CollectiveKind kind, const std::vector<int>& member_nodes, double bytes,
                           const LinkCosts& costs, const NetworkModel* network) {
  check_group_size(static_cast<long long>(member_nodes.size()));
  check_bytes(bytes);
  check_costs(costs);
  const int p = static_cast<int>(member_nodes.size());
  if (p == 1 || bytes == 0) return Algorithm::ring;  // nothing moves; any choice costs 0

  // NCCL's own choice where the model has its tuner and the group fills whole nodes of its shape.
  if (network && network->tuner)
    if (const std::optional<TunerChoice> choice = nccl_tuner_choice(*network->tuner, kind, member_nodes, bytes, costs))
      return choice->algorithm;

  const NodeLayout layout = node_layout(member_nodes);
  Algorithm best = Algorithm::ring;
  double best_time = std::numeric_limits<double>::infinity();
  for (Algorithm algorithm : nccl_candidates(kind)) {
    if (!offered(algorithm, kind, layout, costs)) continue;
    const double time = candidate_time(kind, algorithm, member_nodes, layout, bytes, costs, network);
    if (time < best_time * (1 - kTieTolerance)) {
      best = algorithm;
      best_time = time;
    }
  }
  return best;
}

}  // namespace stratsim::sim
