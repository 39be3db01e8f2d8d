// NCCL's tuner (nccl_tuner.hpp): its bandwidth and latency per algorithm and protocol as
// src/graph/tuning.cc computes them (ncclTopoTuneModel, ncclTopoGetAlgoTime at 2.30.7), from the
// cost model's constants and graphs, and the choice among what the simulator can run.

#include "stratsim/sim/nccl_tuner.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common.hpp"

namespace stratsim::sim {

using collectives::floor_log2;
using collectives::node_layout;
using collectives::NodeLayout;

namespace {

int index_of(NcclAlgorithm algorithm) { return static_cast<int>(algorithm); }
int index_of(NcclProtocol protocol) { return static_cast<int>(protocol); }

// Steps of the ring algorithm per collective (tuning.cc: nsteps): an all-reduce's reduce-scatter
// and all-gather, one pass for the others (a broadcast's ring has p hops).
int ring_steps(core::CollectiveKind kind, int ranks) {
  if (kind == core::CollectiveKind::all_reduce) return 2 * (ranks - 1);
  if (kind == core::CollectiveKind::broadcast) return ranks;
  return ranks - 1;
}

// Bus bandwidth in GB/s, as tuning.cc refines the graph's channels x GB/s, then converted to the
// algorithm bandwidth (bytes / time) the time divides by. 0: not run.
double algorithm_bandwidth(const NcclTuner& tuner, const TunerGraphs& graphs, core::CollectiveKind kind,
                           NcclAlgorithm algorithm, NcclProtocol protocol, int nodes, int ranks) {
  const bool all_reduce = kind == core::CollectiveKind::all_reduce;
  const bool nvls = algorithm == NcclAlgorithm::nvls || algorithm == NcclAlgorithm::nvls_tree;
  const TunerGraph& graph = nvls ? graphs.nvls : (algorithm == NcclAlgorithm::tree ? graphs.tree : graphs.ring);
  if (graph.channels <= 0) return 0;
  const int node_class = std::min(nodes, kNodeClasses) - 1;
  const int per_node = ranks / nodes;
  double bw = nodes <= 2 ? graph.bw_intra : graph.bw_inter;
  if (nvls) {
    // Each head's share of the switch (one channel less than heads), twice over for an all-reduce's
    // two halves; across nodes its NIC, twice on 2 nodes for NVLSTree (a tree of two is one hop).
    double intra = graph.bw_intra * tuner.nvls_efficiency * (graph.channels - 1) / graph.channels;
    intra *= all_reduce ? 2.0 : (per_node - 1.0) / per_node;
    const double inter = graph.bw_inter * (nodes <= 2 && algorithm == NcclAlgorithm::nvls_tree ? 2.0 : 1.0);
    const double cap = algorithm == NcclAlgorithm::nvls_tree ? tuner.nvls_tree_max_bw[node_class]
                                                             : std::numeric_limits<double>::infinity();
    bw = std::min({intra, inter, cap});
  }
  const double channels = graph.channels;
  double bus = channels * bw;
  const bool ring = algorithm == NcclAlgorithm::ring, tree = algorithm == NcclAlgorithm::tree;
  if (ring && protocol == NcclProtocol::ll) bus = std::min(tuner.ll_max_bw[node_class], bus * 0.5);
  if (ring && protocol == NcclProtocol::ll128)
    bus = std::min(bus * 0.92, channels * tuner.ring_ll128_max_bw[node_class]);
  if (tree && all_reduce) bus = std::min(bus * 0.92, channels * tuner.tree_max_bw[node_class]);
  if (tree && protocol == NcclProtocol::ll) bus = std::min(bus / 3.8, tuner.ll_max_bw[node_class]);
  if (tree && protocol == NcclProtocol::ll128)
    bus = std::min(bus * (nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0), channels * tuner.tree_ll128_max_bw[node_class]);
  if (tree && !graphs.tree_balanced) bus *= 0.85;
  // Bus bandwidth to algorithm bandwidth: a ring's n bytes cross nsteps of n / ranks; a tree's
  // all-reduce moves n up and n down. NVLS all-gathers and reduce-scatters are already algbw.
  if (ring || (nvls && all_reduce)) return bus * ranks / ring_steps(kind, ranks);
  if (tree) return bus * 0.5;
  return bus;
}

// Seconds of latency, tuning.cc's per algorithm: the base, then a step latency per hop (NVLink
// inside a node, the network across; rings pay at least the network's overhead a step there).
double algorithm_latency(const NcclTuner& tuner, core::CollectiveKind kind, NcclAlgorithm algorithm,
                         NcclProtocol protocol, int nodes, int ranks) {
  const int a = index_of(algorithm), p = index_of(protocol);
  const int per_node = ranks / nodes;
  double latency = tuner.base_latency[a][p];
  double intra = tuner.hw_latency_nvlink[a][p];
  const double inter =
      per_node > 1 ? tuner.hw_latency_net[a][p] : tuner.hw_latency_net[index_of(NcclAlgorithm::tree)][p];
  switch (algorithm) {
    case NcclAlgorithm::ring: {
      if (nodes > 1) intra = std::max(intra, tuner.net_overhead * (protocol == NcclProtocol::simple ? 3 : 1));
      const int steps = ring_steps(kind, ranks);
      const int inter_steps = nodes == 1 ? 0 : (kind == core::CollectiveKind::all_reduce ? 2 * (nodes - 1) : nodes - 1);
      return latency + (steps - inter_steps) * intra + inter_steps * inter;
    }
    case NcclAlgorithm::tree:
      if (kind == core::CollectiveKind::all_reduce) latency += 2 * ((per_node - 1) * intra + floor_log2(nodes) * inter);
      return latency;
    case NcclAlgorithm::nvls:
      return intra + (nodes > 1 ? inter : 0);
    case NcclAlgorithm::nvls_tree:
      return latency + intra + 2 * floor_log2(nodes) * inter;
  }
  return latency;
}

// The NCCL algorithm the simulator runs for `algorithm` on this layout, if it is one of NCCL's.
struct Candidate {
  NcclAlgorithm nccl;
  Algorithm algorithm;
};

std::vector<Candidate> candidates(core::CollectiveKind kind, const NodeLayout& layout, const LinkCosts& costs) {
  // NCCL's tree is the chain inside one node and the hierarchical tree across nodes (chains inside
  // each, the double binary tree between them), which with one GPU a node is that tree alone.
  const Algorithm tree = layout.m() == 1   ? Algorithm::chain
                         : layout.g() == 1 ? Algorithm::tree
                                           : Algorithm::hierarchical;
  const Candidate all[] = {
      {NcclAlgorithm::tree, tree},
      {NcclAlgorithm::ring, Algorithm::ring},
      {NcclAlgorithm::nvls, Algorithm::nvls},
      {NcclAlgorithm::nvls_tree, Algorithm::nvls_tree},
  };
  std::vector<Candidate> out;
  for (const Candidate& candidate : all)
    if (collectives::offered(candidate.algorithm, kind, layout, costs)) out.push_back(candidate);
  return out;
}

}  // namespace

const TunerGraphs* tuner_graphs(const NcclTuner& tuner, int nodes, int per_node) {
  if (per_node == tuner.gpus_per_node) return nodes == 1 ? &tuner.one_node : &tuner.across_nodes;
  const std::map<int, TunerGraphs>& partial = nodes == 1 ? tuner.one_node_partial : tuner.across_nodes_partial;
  const auto it = partial.find(per_node);
  return it == partial.end() ? nullptr : &it->second;
}

std::optional<double> nccl_tuner_time(const NcclTuner& tuner, core::CollectiveKind kind, NcclAlgorithm algorithm,
                                      NcclProtocol protocol, int nodes, int ranks, double bytes) {
  const bool nvls = algorithm == NcclAlgorithm::nvls || algorithm == NcclAlgorithm::nvls_tree;
  if (nvls && protocol != NcclProtocol::simple) return std::nullopt;  // NVLS runs Simple only
  if ((algorithm == NcclAlgorithm::nvls_tree && nodes == 1) || (algorithm == NcclAlgorithm::nvls && nodes > 1))
    return std::nullopt;
  if (algorithm == NcclAlgorithm::tree && kind != core::CollectiveKind::all_reduce) return std::nullopt;
  const TunerGraphs* graphs = nodes >= 1 && ranks % nodes == 0 ? tuner_graphs(tuner, nodes, ranks / nodes) : nullptr;
  if (!graphs) return std::nullopt;
  double bw = algorithm_bandwidth(tuner, *graphs, kind, algorithm, protocol, nodes, ranks);
  if (!(bw > 0)) return std::nullopt;
  double latency = algorithm_latency(tuner, kind, algorithm, protocol, nodes, ranks);
  const auto& correction = tuner.tree_correction[index_of(protocol)];
  const double units = std::floor(bytes / 64);
  const int log_size = units >= 1 ? static_cast<int>(std::floor(std::log2(units))) : -1;
  if (algorithm == NcclAlgorithm::tree && kind == core::CollectiveKind::all_reduce && log_size >= 0 &&
      log_size < static_cast<int>(correction.size()))
    bw *= correction[log_size];
  // Rings of Simple across nodes reach a plateau that costs more latency (tuning.cc, from Ampere: 1.4).
  if (algorithm == NcclAlgorithm::ring && protocol == NcclProtocol::simple && nodes > 1 &&
      kind == core::CollectiveKind::all_reduce && graphs->comm_channels > 0 &&
      std::floor(bytes / (static_cast<double>(graphs->comm_channels) * ranks)) >= 64)
    latency *= 1.4;
  return latency + bytes / (bw * 1e9);
}

std::optional<TunerChoice> nccl_tuner_choice(const NcclTuner& tuner, core::CollectiveKind kind,
                                             const std::vector<int>& member_nodes, double bytes, const LinkCosts& costs,
                                             std::optional<Algorithm> forced) {
  if (kind != core::CollectiveKind::all_reduce && kind != core::CollectiveKind::all_gather &&
      kind != core::CollectiveKind::reduce_scatter && kind != core::CollectiveKind::broadcast)
    return std::nullopt;
  if (member_nodes.size() < 2 || tuner.gpus_per_node < 2) return std::nullopt;
  const NodeLayout layout = node_layout(member_nodes);
  if (!layout.even || !tuner_graphs(tuner, layout.m(), layout.g())) return std::nullopt;
  const int nodes = layout.m(), ranks = static_cast<int>(member_nodes.size());
  std::optional<TunerChoice> best;
  double best_time = 0;
  for (const Candidate& candidate : candidates(kind, layout, costs)) {
    if (forced && *forced != candidate.algorithm) continue;
    for (NcclProtocol protocol : {NcclProtocol::ll, NcclProtocol::ll128, NcclProtocol::simple}) {
      const std::optional<double> time = nccl_tuner_time(tuner, kind, candidate.nccl, protocol, nodes, ranks, bytes);
      if (!time) continue;
      if (!best || *time < best_time) {  // ties: NCCL's order (algorithms, then protocols)
        best = TunerChoice{candidate.algorithm, protocol};
        best_time = *time;
      }
    }
  }
  return best;
}

}  // namespace stratsim::sim
