// NCCL's tuner: the cost model NCCL itself chooses an algorithm and a protocol by (src/graph/
// tuning.cc), as cost-model data. NCCL picks by its tuner's estimates, which are optimistic in
// different ways for different choices (NVLSTree across H100 nodes from 2 MiB, where the
// simulator's own costs would take its tree under LL128), and then runs what it picked. So where a
// cost model has a tuner, the simulator chooses as NCCL does and prices what then runs with the
// rest of the model (its links, protocols and NVLS rates), instead of choosing by those prices.
//
// The tuner works from the rings, trees and NVLS heads NCCL's topology search finds on a node
// (channels and GB/s a channel, inside a node and across nodes), which are data here too: the
// graph of the preset's node, by node class (one node; two nodes; three and more). It applies to a
// collective whose group holds the same number of GPUs on each of its nodes: all gpus_per_node of
// them, or fewer where the data has the graphs for that many (a TP group of 2 or 4 inside a node;
// the data-parallel groups of TP x DP, 8 / TP GPUs of each node); any other group is chosen by the
// simulator's own costs, as without a tuner.
#pragma once

#include <array>
#include <map>
#include <optional>
#include <vector>

#include "stratsim/core/enum_names.hpp"
#include "stratsim/core/program.hpp"
#include "stratsim/sim/collective.hpp"

namespace stratsim::sim {

// NCCL's algorithms and protocols, in tuning.cc's order where it indexes tables by them.
enum class NcclAlgorithm { tree, ring, nvls, nvls_tree };
enum class NcclProtocol { ll, ll128, simple };
constexpr int kNcclAlgorithms = 4;
constexpr int kNcclProtocols = 3;
// Node classes of tuning.cc's per-channel caps: one node, two nodes, three and more.
constexpr int kNodeClasses = 3;

using PerProtocol = std::array<double, kNcclProtocols>;         // LL, LL128, Simple
using PerAlgorithm = std::array<PerProtocol, kNcclAlgorithms>;  // tree, ring, nvls, nvls_tree
using PerNodeClass = std::array<double, kNodeClasses>;

// One graph of NCCL's topology search: its channels and each channel's GB/s inside a node and
// across nodes.
struct TunerGraph {
  int channels = 0;
  double bw_intra = 0;
  double bw_inter = 0;
};

// The graphs NCCL finds on one node class: rings, trees (balanced inside a node or not) and NVLS
// heads, and the channels the communicator runs (which the ring Simple plateau rule reads).
struct TunerGraphs {
  TunerGraph ring, tree, nvls;
  bool tree_balanced = true;  // BALANCED_TREE; NCCL's simpler "TREE" pattern costs 15 %
  int comm_channels = 0;
};

struct NcclTuner {
  int gpus_per_node = 0;
  PerAlgorithm base_latency{};       // seconds, baseLat
  PerAlgorithm hw_latency_nvlink{};  // seconds a step inside a node, hwLat[NVLINK]
  PerAlgorithm hw_latency_net{};     // seconds a step across nodes, hwLat[NET]
  PerNodeClass ll_max_bw{};          // GB/s, llMaxBws (its CPU's row across nodes)
  PerNodeClass ring_ll128_max_bw{};  // GB/s a channel, perChMaxRingLL128Bws
  PerNodeClass tree_ll128_max_bw{};  // GB/s a channel, perChMaxTreeLL128Bws
  PerNodeClass tree_max_bw{};        // GB/s a channel, perChMaxTreeBws
  PerNodeClass nvls_tree_max_bw{};   // GB/s a channel, perChMaxNVLSTreeBws
  double nvls_efficiency = 1;        // nvlsEfficiency
  double net_overhead = 0;           // seconds a ring step across nodes costs at least (netOverhead)
  // Factors on a tree all-reduce's bandwidth by log2(bytes / 64), per protocol (treeCorrectionFactor).
  std::array<std::vector<double>, kNcclProtocols> tree_correction;
  // The graphs of groups that fill whole nodes (gpus_per_node GPUs of each), inside one node and
  // across nodes; then those of groups holding fewer GPUs of each node, by how many.
  TunerGraphs one_node, across_nodes;
  std::map<int, TunerGraphs> one_node_partial, across_nodes_partial;
};

// The graphs NCCL finds for a group of `per_node` GPUs on each of `nodes` nodes; null where the
// data has none for that many.
const TunerGraphs* tuner_graphs(const NcclTuner& tuner, int nodes, int per_node);

// NCCL's estimate (seconds) for `kind` of `bytes` on `nodes` nodes of `ranks` ranks in all under
// one algorithm and protocol; nullopt where NCCL would not run that pair (no bandwidth), or the
// data has no graphs for ranks / nodes GPUs a node.
std::optional<double> nccl_tuner_time(const NcclTuner& tuner, core::CollectiveKind kind, NcclAlgorithm algorithm,
                                      NcclProtocol protocol, int nodes, int ranks, double bytes);

struct TunerChoice {
  Algorithm algorithm = Algorithm::ring;  // the simulator's algorithm for NCCL's on this group
  NcclProtocol protocol = NcclProtocol::simple;
};

// NCCL's choice for a collective on this group: the lowest tuner estimate among the pairs the
// simulator can run on the group's shape (NVLS where costs.nvls_beta > 0 and the group is one node;
// NVLSTree where costs.nvls_tree_beta > 0 across nodes; NCCL's tree as the chain inside one node,
// the hierarchical tree across nodes, and the double binary tree across nodes of one GPU each).
// `forced`: NCCL_ALGO set, only the protocol is chosen. Nullopt when the tuner does not apply: a
// kind NCCL does not tune (all-to-all, scatter), or a group whose shape has no graphs (uneven
// nodes, or a count of GPUs a node the data does not list).
std::optional<TunerChoice> nccl_tuner_choice(const NcclTuner& tuner, core::CollectiveKind kind,
                                             const std::vector<int>& member_nodes, double bytes, const LinkCosts& costs,
                                             std::optional<Algorithm> forced = std::nullopt);

// Their names: "tree", "ring", "nvls", "nvls_tree" (the tuner's keys) and "LL", "LL128", "Simple"
// (the names the cost model's protocols carry).
inline constexpr core::EnumNames<NcclAlgorithm, kNcclAlgorithms> kNcclAlgorithmNames{{{
    {NcclAlgorithm::tree, "tree"},
    {NcclAlgorithm::ring, "ring"},
    {NcclAlgorithm::nvls, "nvls"},
    {NcclAlgorithm::nvls_tree, "nvls_tree"},
}}};
inline constexpr core::EnumNames<NcclProtocol, kNcclProtocols> kNcclProtocolNames{{{
    {NcclProtocol::ll, "LL"},
    {NcclProtocol::ll128, "LL128"},
    {NcclProtocol::simple, "Simple"},
}}};

}  // namespace stratsim::sim
