// Cost models: the ideal one, the compiled-in preset files, the reader of the documented format,
// and NCCL-style protocol choice.
#include "stratsim/sim/cost_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <map>
#include <optional>
#include <string_view>
#include <tuple>

#include "cost_model_data.hpp"
#include "cost_model_fields.hpp"
#include "stratsim/core/errors.hpp"
#include "stratsim/core/limits.hpp"

namespace stratsim::sim {
namespace {

using detail::read_fraction;
using detail::read_microseconds;

// The collective kind named `name` ("all_reduce"), if any; a scatter has no measured costs.
std::optional<core::CollectiveKind> kind_named(const std::string& name) {
  const std::optional<core::CollectiveKind> kind = core::find_collective_kind(name);
  return kind == core::CollectiveKind::scatter ? std::nullopt : kind;
}

double read_slowdown(const core::JsonReader& node) {
  const double value = node.as_number();
  if (!(value >= 1 && value <= 100)) node.fail(fmt::format("expected a slowdown factor from 1 to 100, got {}", value));
  return value;
}

void read_link_efficiency(const core::JsonReader& node, NetworkModel& network) {
  node.expect_object();
  node.allow_only({"nvlink", "nic", "loopback", "source"});
  if (node.has("nvlink")) network.nvlink_efficiency = read_fraction(node.at("nvlink"));
  if (node.has("nic")) network.nic_efficiency = read_fraction(node.at("nic"));
  if (node.has("loopback")) network.loopback_efficiency = read_fraction(node.at("loopback"));
}

// A list of numbers, each one `valid` accepts (else an error saying what was `expected`).
template <typename Valid>
std::vector<double> read_numbers(const core::JsonReader& node, std::string_view expected, Valid valid) {
  node.expect_array();
  std::vector<double> values;
  for (std::size_t i = 0; i < node.size(); ++i) {
    const double value = node.at(i).as_number();
    if (!valid(value)) node.at(i).fail(fmt::format("expected {}, got {}", expected, value));
    values.push_back(value);
  }
  return values;
}

// {ranks: 8, nodes: 1, bytes: [16384, ...], us: [52, ...]}: one group shape's measured times.
MeasuredCurve read_measured_curve(const core::JsonReader& node) {
  node.expect_object();
  node.allow_only({"ranks", "nodes", "bytes", "us", "source"});
  MeasuredCurve curve;
  const std::int64_t ranks = node.at("ranks").as_int();
  if (ranks < 2 || ranks > (1 << 20)) node.at("ranks").fail(fmt::format("expected a group size from 2, got {}", ranks));
  curve.ranks = static_cast<int>(ranks);
  const std::int64_t nodes = node.get_int("nodes", 1);
  if (nodes < 1 || nodes > ranks)
    node.at("nodes").fail(fmt::format("expected 1 to {} nodes (the ranks), got {}", ranks, nodes));
  curve.nodes = static_cast<int>(nodes);
  curve.bytes = read_numbers(node.at("bytes"), "a number of bytes from 1 to 2^50",
                             [](double v) { return v >= 1 && v <= static_cast<double>(core::kMaxCollectiveBytes); });
  std::vector<double> us = read_numbers(node.at("us"), "a positive number of microseconds up to 1e9",
                                        [](double v) { return v > 0 && v <= core::kMaxCollectiveMicroseconds; });
  if (curve.bytes.size() < 2) node.at("bytes").fail("expected at least two sizes");
  if (us.size() != curve.bytes.size())
    node.at("us").fail(fmt::format("expected one time per size ({}), got {}", curve.bytes.size(), us.size()));
  for (std::size_t i = 1; i < curve.bytes.size(); ++i)
    if (!(curve.bytes[i] > curve.bytes[i - 1]))
      node.at("bytes").at(i).fail(
          fmt::format("expected sizes in increasing order, got {} after {}", curve.bytes[i], curve.bytes[i - 1]));
  for (double t : us) curve.seconds.push_back(t * 1e-6);
  return curve;
}

std::vector<MeasuredCurve> read_measured(const core::JsonReader& node) {
  node.expect_array();
  std::vector<MeasuredCurve> curves;
  for (std::size_t i = 0; i < node.size(); ++i) {
    MeasuredCurve curve = read_measured_curve(node.at(i));
    for (const MeasuredCurve& other : curves)
      if (other.ranks == curve.ranks && other.nodes == curve.nodes)
        node.at(i).at("ranks").fail(fmt::format("{} ranks on {} node{} are measured twice", curve.ranks, curve.nodes,
                                                curve.nodes > 1 ? "s" : ""));
    curves.push_back(std::move(curve));
  }
  std::sort(curves.begin(), curves.end(),
            [](const auto& a, const auto& b) { return std::tie(a.ranks, a.nodes) < std::tie(b.ranks, b.nodes); });
  return curves;
}

// nvls.first_loop_fraction and nvls.first_loop_mib: both or neither.
void read_nvls_first_loop(const core::JsonReader& nvls, NetworkModel& network) {
  network.nvls_first_loop_fraction = network.nvls_first_loop_bytes = 0;
  const bool fraction = nvls.has("first_loop_fraction"), mib = nvls.has("first_loop_mib");
  if (fraction != mib)
    nvls.fail(fraction ? "first_loop_fraction needs first_loop_mib (the bytes of NVLS's first loop)"
                       : "first_loop_mib needs first_loop_fraction (the share of that loop not overlapped)");
  if (!fraction) return;
  network.nvls_first_loop_fraction = read_fraction(nvls.at("first_loop_fraction"));
  const double loop = nvls.at("first_loop_mib").as_number();
  if (!(loop > 0 && loop <= 1 << 20))
    nvls.at("first_loop_mib").fail(fmt::format("expected more than 0 and up to 1048576 MiB, got {}", loop));
  network.nvls_first_loop_bytes = loop * 1024 * 1024;
}

Protocol read_protocol(const core::JsonReader& node) {
  node.expect_object();
  node.allow_only({"name", "bandwidth_fraction", "base_latency_us", "step_latency_us", "max_bytes",
                   "pipeline_chunk_kib", "measured", "source"});
  Protocol protocol;
  protocol.name = node.at("name").as_string();
  if (protocol.name.empty()) node.at("name").fail("expected a protocol name");
  // Curves alone need no line: the shapes they do not hold fall back to the protocols.
  protocol.has_line = node.has("bandwidth_fraction") || !node.has("measured");
  if (protocol.has_line) protocol.bandwidth_fraction = read_fraction(node.at("bandwidth_fraction"));
  if (node.has("base_latency_us")) protocol.base_latency = read_microseconds(node.at("base_latency_us"));
  if (node.has("step_latency_us")) {
    // One number for every step, or {nvlink: .., nic: ..}.
    const core::JsonReader steps = node.at("step_latency_us");
    if (steps.is_object()) {
      steps.allow_only({"nvlink", "nic"});
      if (steps.has("nvlink")) protocol.step_latency_intra = read_microseconds(steps.at("nvlink"));
      if (steps.has("nic")) protocol.step_latency_inter = read_microseconds(steps.at("nic"));
    } else {
      protocol.step_latency_intra = protocol.step_latency_inter = read_microseconds(steps);
    }
  }
  if (node.has("max_bytes")) {
    const double bytes = node.at("max_bytes").as_number();
    if (!(bytes > 0)) node.at("max_bytes").fail(fmt::format("expected a positive number of bytes, got {}", bytes));
    protocol.max_bytes = bytes;
  }
  if (node.has("pipeline_chunk_kib")) {
    const double kib = node.at("pipeline_chunk_kib").as_number();
    if (!(kib >= 0 && kib <= 1 << 20))
      node.at("pipeline_chunk_kib").fail(fmt::format("expected 0 to 1048576 KiB, got {}", kib));
    protocol.pipeline_chunk = kib * 1024;
  }
  if (node.has("measured")) protocol.measured = read_measured(node.at("measured"));
  return protocol;
}

// ---- network.tuner: NCCL's tuning.cc constants and the graphs of the preset's node.

// Exactly N numbers from 0 to `most`.
template <std::size_t N>
std::array<double, N> read_fixed(const core::JsonReader& node, double most, const char* what) {
  node.expect_array();
  if (node.size() != N) node.fail(fmt::format("expected {} numbers ({}), got {}", N, what, node.size()));
  const std::vector<double> read =
      read_numbers(node, fmt::format("a number from 0 to {}", most), [most](double v) { return v >= 0 && v <= most; });
  std::array<double, N> values{};
  std::ranges::copy(read, values.begin());
  return values;
}

// {tree: [LL, LL128, Simple], ring: [..], nvls: [..], nvls_tree: [..]} in microseconds, as seconds.
PerAlgorithm read_latencies(const core::JsonReader& node) {
  node.expect_object();
  node.allow_only({"tree", "ring", "nvls", "nvls_tree"});
  PerAlgorithm table{};
  for (const auto& [algorithm, name] : kNcclAlgorithmNames.entries) {
    std::array<double, kNcclProtocols>& row = table[static_cast<int>(algorithm)];
    row = read_fixed<kNcclProtocols>(node.at(std::string(name)), 1e6, "microseconds for LL, LL128 and Simple");
    for (double& us : row) us *= 1e-6;
  }
  return table;
}

double read_bounded(const core::JsonReader& node, double least, double most, const char* unit) {
  const double value = node.as_number();
  if (!(value >= least && value <= most))
    node.fail(fmt::format("expected {} from {} to {}, got {}", unit, least, most, value));
  return value;
}

int read_channels(const core::JsonReader& node) {
  const std::int64_t channels = node.as_int();
  if (channels < 1 || channels > 64) node.fail(fmt::format("expected channels from 1 to 64, got {}", channels));
  return static_cast<int>(channels);
}

TunerGraph read_graph(const core::JsonReader& node) {
  node.expect_object();
  node.allow_only({"channels", "gbps_intra", "gbps_inter"});
  TunerGraph graph;
  graph.channels = read_channels(node.at("channels"));
  graph.bw_intra = read_bounded(node.at("gbps_intra"), 0, 1e4, "GB/s");
  graph.bw_inter = read_bounded(node.at("gbps_inter"), 0, 1e4, "GB/s");
  return graph;
}

// One node class's graphs: {ring: .., tree: .., nvls: .., tree_balanced: bool, comm_channels: n}.
TunerGraphs read_graphs(const core::JsonReader& node) {
  node.expect_object();
  node.allow_only({"ring", "tree", "nvls", "tree_balanced", "comm_channels"});
  TunerGraphs graphs;
  graphs.ring = read_graph(node.at("ring"));
  graphs.tree = read_graph(node.at("tree"));
  if (node.has("nvls")) graphs.nvls = read_graph(node.at("nvls"));
  graphs.tree_balanced = node.get_bool("tree_balanced", true);
  graphs.comm_channels = read_channels(node.at("comm_channels"));
  return graphs;
}

// Graphs by GPUs a node, {4: {ring: .., ..}, 2: ..}: keys from `least` to gpus_per_node - 1.
std::map<int, TunerGraphs> read_graphs_by_gpus(const core::JsonReader& node, int least, int gpus_per_node) {
  node.expect_object();
  std::map<int, TunerGraphs> by_gpus;
  for (const std::string& key : node.keys()) {
    int gpus = 0;
    const auto [end, error] = std::from_chars(key.data(), key.data() + key.size(), gpus);
    if (error != std::errc() || end != key.data() + key.size() || gpus < least || gpus >= gpus_per_node)
      node.at(key).fail(
          fmt::format("expected a key that counts the group's GPUs a node, {} to {} (fewer than "
                      "gpus_per_node), got \"{}\"",
                      least, gpus_per_node - 1, key));
    by_gpus[gpus] = read_graphs(node.at(key));
  }
  return by_gpus;
}

void read_tuner(const core::JsonReader& node, NetworkModel& network) {
  node.expect_object();
  node.allow_only({"gpus_per_node", "base_latency_us", "hw_latency_us", "ll_max_gbps",
                   "ring_ll128_max_gbps_per_channel", "tree_ll128_max_gbps_per_channel", "tree_max_gbps_per_channel",
                   "nvls_tree_max_gbps_per_channel", "nvls_efficiency", "net_overhead_us", "tree_correction", "graphs",
                   "source"});
  NcclTuner tuner;
  const std::int64_t gpus = node.at("gpus_per_node").as_int();
  if (gpus < 2 || gpus > 1024) node.at("gpus_per_node").fail(fmt::format("expected 2 to 1024 GPUs, got {}", gpus));
  tuner.gpus_per_node = static_cast<int>(gpus);
  tuner.base_latency = read_latencies(node.at("base_latency_us"));
  const core::JsonReader hw = node.at("hw_latency_us");
  hw.expect_object();
  hw.allow_only({"nvlink", "net"});
  tuner.hw_latency_nvlink = read_latencies(hw.at("nvlink"));
  tuner.hw_latency_net = read_latencies(hw.at("net"));
  const char* classes = "one node, two nodes, three and more";
  tuner.ll_max_bw = read_fixed<kNodeClasses>(node.at("ll_max_gbps"), 1e4, classes);
  tuner.ring_ll128_max_bw = read_fixed<kNodeClasses>(node.at("ring_ll128_max_gbps_per_channel"), 1e4, classes);
  tuner.tree_ll128_max_bw = read_fixed<kNodeClasses>(node.at("tree_ll128_max_gbps_per_channel"), 1e4, classes);
  tuner.tree_max_bw = read_fixed<kNodeClasses>(node.at("tree_max_gbps_per_channel"), 1e4, classes);
  tuner.nvls_tree_max_bw = read_fixed<kNodeClasses>(node.at("nvls_tree_max_gbps_per_channel"), 1e4, classes);
  // NCCL has NVLS from Hopper on; an Ampere tuner has no nvls graphs and no efficiency.
  if (node.has("nvls_efficiency")) tuner.nvls_efficiency = read_fraction(node.at("nvls_efficiency"));
  tuner.net_overhead = read_microseconds(node.at("net_overhead_us"));
  const core::JsonReader correction = node.at("tree_correction");
  correction.expect_object();
  correction.allow_only({"LL", "LL128", "Simple"});
  for (const auto& [protocol, name] : kNcclProtocolNames.entries) {
    const core::JsonReader factors = correction.at(std::string(name));
    std::vector<double>& row = tuner.tree_correction[static_cast<int>(protocol)];
    row = read_numbers(factors, "a factor in (0, 1]", [](double v) { return v > 0 && v <= 1; });
    if (row.size() > 64) factors.fail("expected at most 64 factors (64 B to 2^69 B)");
  }
  const core::JsonReader graphs = node.at("graphs");
  graphs.expect_object();
  graphs.allow_only({"one_node", "across_nodes", "fewer_gpus"});
  tuner.one_node = read_graphs(graphs.at("one_node"));
  tuner.across_nodes = read_graphs(graphs.at("across_nodes"));
  if (graphs.has("fewer_gpus")) {
    const core::JsonReader fewer = graphs.at("fewer_gpus");
    fewer.expect_object();
    fewer.allow_only({"one_node", "across_nodes"});
    // A one-node group holds at least 2 GPUs; across nodes, a GPU of each node is a group too.
    if (fewer.has("one_node"))
      tuner.one_node_partial = read_graphs_by_gpus(fewer.at("one_node"), 2, tuner.gpus_per_node);
    if (fewer.has("across_nodes"))
      tuner.across_nodes_partial = read_graphs_by_gpus(fewer.at("across_nodes"), 1, tuner.gpus_per_node);
  }
  network.tuner = std::move(tuner);
}

void read_network(const core::JsonReader& node, NetworkModel& network) {
  node.expect_object();
  node.allow_only({"link_efficiency", "protocols", "nvls", "algorithms", "per_kind", "tuner", "source"});
  if (node.has("tuner")) read_tuner(node.at("tuner"), network);
  if (node.has("per_kind")) {
    // Keys: a kind ("all_reduce") or a kind and a dtype ("all_reduce/float16").
    const core::JsonReader kinds = node.at("per_kind");
    kinds.expect_object();
    for (const std::string& key : kinds.keys()) {
      if (key == "source") continue;
      const auto slash = key.find('/');
      const std::optional<core::CollectiveKind> kind = kind_named(key.substr(0, slash));
      const std::optional<core::DType> dtype =
          slash == std::string::npos ? std::nullopt : core::parse_dtype(key.substr(slash + 1));
      if (!kind || (slash != std::string::npos && !dtype))
        kinds.at(key).fail(
            "unknown collective (expected all_reduce, all_gather, reduce_scatter, broadcast or all_to_all, "
            "optionally /DTYPE)");
      if (dtype) network.per_kind_dtype[{*kind, *dtype}] = read_protocol(kinds.at(key));
      else network.per_kind[*kind] = read_protocol(kinds.at(key));
    }
  }
  if (node.has("algorithms")) {
    const core::JsonReader list = node.at("algorithms");
    list.expect_object();
    list.allow_only({"all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "source"});
    for (const std::string& key : list.keys()) {
      if (key == "source") continue;
      const core::CollectiveKind kind = *kind_named(key);  // allow_only checked it is a kind's name
      const std::optional<Algorithm> algorithm = parse_algorithm(list.at(key).as_string());
      if (!algorithm || *algorithm == Algorithm::automatic || *algorithm == Algorithm::nvls ||
          *algorithm == Algorithm::nvls_tree || !implements(*algorithm, kind))
        list.at(key).fail(
            fmt::format("expected an algorithm that implements {} (ring, tree, rhd, direct, "
                        "hierarchical), got \"{}\"",
                        key, list.at(key).as_string()));
      network.algorithms[kind] = *algorithm;
    }
  }
  if (node.has("link_efficiency")) read_link_efficiency(node.at("link_efficiency"), network);
  if (node.has("nvls")) {
    const core::JsonReader nvls = node.at("nvls");
    nvls.expect_object();
    nvls.allow_only({"bandwidth_fraction", "tree_bandwidth_fraction", "base_latency_us", "tree_base_latency_us",
                     "first_loop_fraction", "first_loop_mib", "source"});
    network.nvls_bandwidth_fraction = read_fraction(nvls.at("bandwidth_fraction"));
    network.nvls_tree_bandwidth_fraction =
        nvls.has("tree_bandwidth_fraction") ? read_fraction(nvls.at("tree_bandwidth_fraction")) : 0;
    network.nvls_base_latency = nvls.has("base_latency_us") ? read_microseconds(nvls.at("base_latency_us")) : 0;
    network.nvls_tree_base_latency =
        nvls.has("tree_base_latency_us") ? read_microseconds(nvls.at("tree_base_latency_us")) : 0;
    read_nvls_first_loop(nvls, network);
  }
  if (node.has("protocols")) {
    const core::JsonReader list = node.at("protocols");
    list.expect_array();
    network.protocols.clear();
    for (std::size_t i = 0; i < list.size(); ++i) {
      Protocol protocol = read_protocol(list.at(i));
      for (const Protocol& other : network.protocols)
        if (other.name == protocol.name) list.at(i).at("name").fail("protocol named twice");
      network.protocols.push_back(std::move(protocol));
    }
    // Every collective must have a protocol, however large.
    bool unbounded = network.protocols.empty();
    for (const Protocol& protocol : network.protocols) unbounded = unbounded || std::isinf(protocol.max_bytes);
    if (!unbounded) list.fail("expected at least one protocol without max_bytes (it carries the largest collectives)");
  }
}

void read_interference(const core::JsonReader& node, Interference& interference) {
  node.expect_object();
  node.allow_only({"compute_slowdown", "communication_slowdown", "source"});
  if (node.has("compute_slowdown")) interference.compute_slowdown = read_slowdown(node.at("compute_slowdown"));
  if (node.has("communication_slowdown"))
    interference.communication_slowdown = read_slowdown(node.at("communication_slowdown"));
}

}  // namespace

CostModel CostModel::ideal() { return CostModel{}; }

// The compiled-in files, parsed once: every parse_platform() of a preset copies one.
CostModel CostModel::preset(const std::string& name) {
  static const std::map<std::string, CostModel> presets = [] {
    std::map<std::string, CostModel> parsed;
    for (const detail::CostModelFile& file : detail::cost_model_files()) {
      const std::string origin = fmt::format("sim/cost-models/{}.yaml", file.preset);
      const nlohmann::json document = core::parse_document(file.text, origin, true);
      parsed[file.preset].apply(core::JsonReader(document, origin));
    }
    return parsed;
  }();
  if (auto it = presets.find(name); it != presets.end()) return it->second;
  throw core::InputError(fmt::format("no cost model for preset \"{}\"", name));
}

void CostModel::apply(const core::JsonReader& root) {
  root.expect_object();
  root.allow_only({"name", "sources", "compute", "network", "interference"});
  CostModel updated = *this;
  updated.name = root.has("name") ? root.at("name").as_string() : root.file();
  if (root.has("sources")) updated.sources = root.get_string_list("sources");
  if (root.has("compute")) updated.compute.apply(root.at("compute"));
  if (root.has("network")) read_network(root.at("network"), updated.network);
  if (root.has("interference")) read_interference(root.at("interference"), updated.interference);
  *this = std::move(updated);
}

void CostModel::apply_file(const std::string& path) {
  const nlohmann::json document = core::load_document(path);
  apply(core::JsonReader(document, path));
}

double MeasuredCurve::seconds_at(double n) const {
  if (n <= bytes.front()) return seconds.front();
  if (n >= bytes.back()) return seconds.back() * n / bytes.back();
  const std::size_t upper = static_cast<std::size_t>(std::upper_bound(bytes.begin(), bytes.end(), n) - bytes.begin());
  const double share = (n - bytes[upper - 1]) / (bytes[upper] - bytes[upper - 1]);
  return seconds[upper - 1] + share * (seconds[upper] - seconds[upper - 1]);
}

const MeasuredCurve* Protocol::measured_on(int ranks, int nodes) const {
  for (const MeasuredCurve& curve : measured)
    if (curve.ranks == ranks && curve.nodes == nodes) return &curve;
  return nullptr;
}

double fill_chunk(const Protocol& protocol, double chunk_limit, double chunk_fraction) {
  return std::min(protocol.pipeline_chunk * chunk_fraction, chunk_limit);
}

double protocol_time(const Protocol& protocol, const ScheduleCost& cost) {
  return protocol.base_latency + cost.latency + cost.intra_steps * protocol.step_latency_intra +
         cost.inter_steps * protocol.step_latency_inter +
         (cost.bandwidth + fill_chunk(protocol, cost.chunk_limit, cost.chunk_fraction) * cost.fill) /
             protocol.bandwidth_fraction;
}

const Protocol* choose_protocol(const NetworkModel& network, double bytes, const ScheduleCost& cost) {
  const Protocol* best = nullptr;
  double best_time = 0;
  for (const Protocol& protocol : network.protocols) {
    if (bytes > protocol.max_bytes) continue;
    const double time = protocol_time(protocol, cost);
    if (!best || time < best_time) best = &protocol, best_time = time;  // ties: the first listed
  }
  return best;
}

const Protocol* find_protocol(const NetworkModel& network, std::string_view name) {
  for (const Protocol& protocol : network.protocols)
    if (std::ranges::equal(protocol.name, name, [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
        }))
      return &protocol;
  return nullptr;
}

const Protocol* nvls_protocol(const NetworkModel& network) { return find_protocol(network, "Simple"); }

}  // namespace stratsim::sim
