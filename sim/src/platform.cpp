// Platform presets, the "preset:key=value,..." syntax, platform description files, and the
// one-line description. Plain data: nothing here touches SimGrid (see platform_build.cpp).
#include "stratsim/sim/platform.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <set>
#include <variant>

#include "stratsim/core/errors.hpp"
#include "stratsim/core/json_reader.hpp"

namespace stratsim::sim {
namespace {

using core::DType;
using core::InputError;

constexpr double kGB = 1e9;          // bandwidth options are in GB/s = 1e9 bytes/s
constexpr double kGiB = 1073741824;  // 2^30
constexpr double kUs = 1e-6;
// Size limits that keep build_platform() (platform_build.cpp) fast and small. SimGrid 3.32
// routing memory grows as GPUs x GPUs-per-leaf plus leaves^2, and its build time as GPUs x
// leaves: 16384 H100s build in ~1 s and ~100 MB; 131072 take over a minute. A typo like
// nodes=1000000 should fail here, not exhaust memory in the simulator.
constexpr long long kMaxDevices = 1 << 17;
constexpr long long kMaxGpusPerLeaf = 1024;
constexpr long long kMaxLeaves = 4096;

// ---------------------------------------------------------------------------------------------
// Presets. Figures are dense (no sparsity) peaks from NVIDIA's public datasheets:
//  - A100: "NVIDIA A100 Tensor Core GPU" datasheet, SXM4 80GB column: FP64 9.7 TFLOPS, FP32
//    19.5 TFLOPS, BF16/FP16 Tensor Core 312 TFLOPS, HBM2e 2,039 GB/s, 80 GB, NVLink 600 GB/s
//    (both directions together, so 300 GB/s each way). NIC: ConnectX-6 HDR InfiniBand 200 Gb/s
//    = 25 GB/s (DGX A100 has one per GPU).
//  - H100: "NVIDIA H100 Tensor Core GPU" datasheet, SXM5 column: FP64 34 TFLOPS, FP32 67 TFLOPS,
//    BF16/FP16 Tensor Core 1,979 TFLOPS with sparsity = 989.4 dense, HBM3 3.35 TB/s, 80 GB,
//    NVLink 900 GB/s (450 GB/s each way). NIC: ConnectX-7 NDR 400 Gb/s = 50 GB/s per GPU (DGX H100).
//  - H200: "NVIDIA H200 Tensor Core GPU" datasheet, SXM column: same math as H100 SXM, HBM3e
//    4.8 TB/s, 141 GB, NVLink 900 GB/s; NDR 400 Gb/s NICs (DGX H200).
// float32 is the plain FP32 (CUDA core) rate, not TF32; float64 likewise the non-tensor rate.
// The "80 GB" parts are taken as 80 GiB, about what nvidia-smi reports. The H200 "141 GB" holds
// 150,109,880,320 bytes as CUDA reports it (cudaGetDeviceProperties on an H200 SXM, 2026-11-26):
// what PyTorch can allocate from, 139.8 GiB.
// Latencies are estimates: PyTorch's copy of NCCL's tuning model (simulators.md section 5) uses
// 0.6 us hardware latency for NVLink, so 0.3 us per GPU-switch link (a route crosses two); a NIC
// link 1.25 us (HCA + PCIe + cable); NVIDIA Quantum QM8700 switches quote 130 ns port to port
// (used for NDR too). collective_overhead stands for the NCCL kernel launch and proxy start-up.
// ---------------------------------------------------------------------------------------------

PlatformSpec gpu_preset(const std::string& preset, const std::string& device, double fp32, double tensor, double fp64,
                        double hbm_bandwidth, double hbm_bytes, double nvlink, double nic) {
  PlatformSpec spec;
  spec.preset = preset;
  spec.kind = PlatformKind::node;
  spec.device.name = device;
  spec.device.peak_flops = {
      {DType::float32, fp32}, {DType::bfloat16, tensor}, {DType::float16, tensor}, {DType::float64, fp64}};
  spec.device.memory_bandwidth = hbm_bandwidth;
  spec.device.memory_bytes = hbm_bytes;
  spec.nodes = 1;
  spec.gpus_per_node = 8;  // HGX/DGX baseboard
  spec.nvlink_bandwidth = nvlink;
  spec.nvlink_latency = 0.3 * kUs;
  spec.nic_bandwidth = nic;
  spec.nic_latency = 1.25 * kUs;
  spec.nic_per_gpu = true;
  spec.fabric = Fabric::fat_tree;
  spec.oversubscription = 1;
  spec.nodes_per_leaf = 4;  // a 64-port leaf: 4 nodes x 8 NICs down, 32 ports up (non-blocking)
  spec.switch_latency = 0.13 * kUs;
  spec.collective_overhead = 5 * kUs;
  return spec;
}

// A CPU host running one training process per rank, talking over loopback TCP (Gloo). Typical
// figures for a current two-socket x86 server, not a datasheet: a process gets ~8 cores of AVX2
// FMA (about 200 GFLOP/s float32 sustained, half that in float64) and ~20 GB/s of DRAM
// bandwidth; one TCP stream over `lo` moves ~40 Gbit/s = 5 GB/s (iperf3), with ~7.5 us per
// socket hop (a message crosses the sender's and the receiver's, ~15 us one way); all loopback
// copies share the memory system, ~20 GB/s in total. Gloo's per-collective set-up is ~20 us.
PlatformSpec cpu_preset() {
  PlatformSpec spec;
  spec.preset = "cpu";
  spec.kind = PlatformKind::cpu_host;
  spec.device.name = "CPU-process";
  spec.device.peak_flops = {{DType::float32, 200e9}, {DType::float64, 100e9}};  // bf16/fp16 fall back to fp32
  spec.device.memory_bandwidth = 20 * kGB;
  spec.device.memory_bytes = 16 * kGiB;
  spec.nodes = 1;
  spec.gpus_per_node = 4;
  spec.nvlink_bandwidth = 5 * kGB;
  spec.nvlink_latency = 7.5 * kUs;
  spec.loopback_bandwidth = 20 * kGB;
  spec.collective_overhead = 20 * kUs;
  return spec;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// `given` as the user wrote it: matched case-insensitively, named as written when unknown (it may
// be a path, whose case matters).
PlatformSpec hardware_spec(const std::string& given) {
  const std::string name = lower(given);
  if (name == "a100")
    return gpu_preset("a100", "A100-SXM4-80GB", 19.5e12, 312e12, 9.7e12, 2039 * kGB, 80 * kGiB, 300 * kGB, 25 * kGB);
  if (name == "h100")
    return gpu_preset("h100", "H100-SXM5-80GB", 67e12, 989.4e12, 34e12, 3350 * kGB, 80 * kGiB, 450 * kGB, 50 * kGB);
  if (name == "h200")
    return gpu_preset("h200", "H200-SXM-141GB", 67e12, 989.4e12, 34e12, 4800 * kGB, 150109880320.0, 450 * kGB,
                      50 * kGB);
  if (name == "cpu") return cpu_preset();
  throw InputError(fmt::format("unknown platform preset \"{}\" (known: a100, h100, h200, cpu)", given));
}

PlatformSpec preset_spec(const std::string& given) {
  PlatformSpec spec = hardware_spec(given);
  spec.cost = CostModel::preset(spec.preset);
  return spec;
}

// ---------------------------------------------------------------------------------------------
// Options. One table serves the text syntax and description files, so both accept the same keys
// with the same checks.
// ---------------------------------------------------------------------------------------------

enum class Kind { count, positive, non_negative, ratio, nic, fabric, model };
using Value = std::variant<double, std::string>;

struct Option {
  const char* key;
  Kind kind;
  std::function<void(PlatformSpec&, const Value&)> apply;
};

double num(const Value& v) { return std::get<double>(v); }
const std::string& text(const Value& v) { return std::get<std::string>(v); }

void set_peak(PlatformSpec& s, DType dtype, double flops) { s.device.peak_flops[dtype] = flops; }

// Scales every dtype's peak so float32 becomes `flops`: CPU dtypes keep their ratios.
void scale_peaks(PlatformSpec& s, double flops) {
  const double factor = flops / s.device.peak_for(DType::float32);
  for (auto& [dtype, peak] : s.device.peak_flops) peak *= factor;
}

// model=ideal: every efficiency 1 (bare roofline, alpha-beta collectives); model=published: the
// preset's cost model (the default).
void apply_model(PlatformSpec& s, const Value& v) {
  s.cost = text(v) == "ideal" ? CostModel::ideal() : CostModel::preset(s.preset);
}

const std::vector<Option>& gpu_options() {
  static const std::vector<Option> options = {
      {"nodes", Kind::count, [](PlatformSpec& s, const Value& v) { s.nodes = static_cast<int>(num(v)); }},
      {"gpus", Kind::count, [](PlatformSpec& s, const Value& v) { s.gpus_per_node = static_cast<int>(num(v)); }},
      {"nic", Kind::nic, [](PlatformSpec& s, const Value& v) { s.nic_per_gpu = text(v) == "gpu"; }},
      {"fabric", Kind::fabric,
       [](PlatformSpec& s, const Value& v) {
         s.fabric = text(v) == "fat-tree" || text(v) == "fat_tree" ? Fabric::fat_tree : Fabric::spine_leaf;
       }},
      {"oversub", Kind::ratio, [](PlatformSpec& s, const Value& v) { s.oversubscription = num(v); }},
      {"nodes_per_leaf", Kind::count,
       [](PlatformSpec& s, const Value& v) { s.nodes_per_leaf = static_cast<int>(num(v)); }},
      {"nvlink_gbps", Kind::positive, [](PlatformSpec& s, const Value& v) { s.nvlink_bandwidth = num(v) * kGB; }},
      {"nic_gbps", Kind::positive, [](PlatformSpec& s, const Value& v) { s.nic_bandwidth = num(v) * kGB; }},
      {"nvlink_lat_us", Kind::non_negative, [](PlatformSpec& s, const Value& v) { s.nvlink_latency = num(v) * kUs; }},
      {"nic_lat_us", Kind::non_negative, [](PlatformSpec& s, const Value& v) { s.nic_latency = num(v) * kUs; }},
      {"switch_lat_us", Kind::non_negative, [](PlatformSpec& s, const Value& v) { s.switch_latency = num(v) * kUs; }},
      {"overhead_us", Kind::non_negative,
       [](PlatformSpec& s, const Value& v) { s.collective_overhead = num(v) * kUs; }},
      {"tflops_bf16", Kind::positive,
       [](PlatformSpec& s, const Value& v) { set_peak(s, DType::bfloat16, num(v) * 1e12); }},
      {"tflops_fp16", Kind::positive,
       [](PlatformSpec& s, const Value& v) { set_peak(s, DType::float16, num(v) * 1e12); }},
      {"tflops_fp32", Kind::positive,
       [](PlatformSpec& s, const Value& v) { set_peak(s, DType::float32, num(v) * 1e12); }},
      {"tflops_fp64", Kind::positive,
       [](PlatformSpec& s, const Value& v) { set_peak(s, DType::float64, num(v) * 1e12); }},
      {"hbm_gbps", Kind::positive, [](PlatformSpec& s, const Value& v) { s.device.memory_bandwidth = num(v) * kGB; }},
      {"hbm_gib", Kind::positive, [](PlatformSpec& s, const Value& v) { s.device.memory_bytes = num(v) * kGiB; }},
      {"power_w", Kind::positive, [](PlatformSpec& s, const Value& v) { s.device.power_limit_w = num(v); }},
      {"model", Kind::model, apply_model},
  };
  return options;
}

const std::vector<Option>& cpu_options() {
  static const std::vector<Option> options = {
      {"procs", Kind::count, [](PlatformSpec& s, const Value& v) { s.gpus_per_node = static_cast<int>(num(v)); }},
      {"cores", Kind::count, [](PlatformSpec& s, const Value& v) { s.cores = static_cast<int>(num(v)); }},
      {"host_dram_gbps", Kind::positive,
       [](PlatformSpec& s, const Value& v) { s.host_memory_bandwidth = num(v) * kGB; }},
      {"gbps", Kind::positive, [](PlatformSpec& s, const Value& v) { s.nvlink_bandwidth = num(v) * kGB; }},
      {"lat_us", Kind::non_negative, [](PlatformSpec& s, const Value& v) { s.nvlink_latency = num(v) * kUs; }},
      {"loopback_gbps", Kind::positive, [](PlatformSpec& s, const Value& v) { s.loopback_bandwidth = num(v) * kGB; }},
      {"gflops", Kind::positive, [](PlatformSpec& s, const Value& v) { scale_peaks(s, num(v) * 1e9); }},
      {"dram_gbps", Kind::positive, [](PlatformSpec& s, const Value& v) { s.device.memory_bandwidth = num(v) * kGB; }},
      {"mem_gib", Kind::positive, [](PlatformSpec& s, const Value& v) { s.device.memory_bytes = num(v) * kGiB; }},
      {"overhead_us", Kind::non_negative,
       [](PlatformSpec& s, const Value& v) { s.collective_overhead = num(v) * kUs; }},
      {"model", Kind::model, apply_model},
  };
  return options;
}

const std::vector<Option>& options_for(const std::string& preset) {
  return preset == "cpu" ? cpu_options() : gpu_options();
}

std::string option_names(const std::vector<Option>& options) {
  std::string names;
  for (const Option& option : options) names += (names.empty() ? "" : ", ") + std::string(option.key);
  return names;
}

const Option* find_option(const std::vector<Option>& options, const std::string& key) {
  for (const Option& option : options)
    if (key == option.key) return &option;
  return nullptr;
}

// What a value of this kind must be, for error messages.
std::string expectation(Kind kind) {
  switch (kind) {
    case Kind::count:
      return "a positive integer";
    case Kind::positive:
      return "a positive number";
    case Kind::non_negative:
      return "a non-negative number";
    case Kind::ratio:
      return "a number >= 1";
    case Kind::nic:
      return "gpu or node";
    case Kind::fabric:
      return "fat-tree or spine-leaf";
    case Kind::model:
      return "ideal or published";
  }
  return "";
}

bool acceptable(Kind kind, const Value& value) {
  if (const auto* s = std::get_if<std::string>(&value)) {
    if (kind == Kind::nic) return *s == "gpu" || *s == "node";
    if (kind == Kind::fabric) return *s == "fat-tree" || *s == "fat_tree" || *s == "spine-leaf" || *s == "spine_leaf";
    if (kind == Kind::model) return *s == "ideal" || *s == "published";
    return false;
  }
  const double x = std::get<double>(value);
  if (!std::isfinite(x)) return false;
  switch (kind) {
    case Kind::count:
      return x >= 1 && x <= 1e9 && x == std::floor(x);  // fits an int; sizes checked in finish()
    case Kind::positive:
      return x > 0;
    case Kind::non_negative:
      return x >= 0;
    case Kind::ratio:
      return x >= 1;
    default:
      return false;
  }
}

bool is_text_kind(Kind kind) { return kind == Kind::nic || kind == Kind::fabric || kind == Kind::model; }

// Text form: "4", "2.5", "1e3" for numbers; anything for the named kinds (checked afterwards).
std::optional<Value> parse_text_value(Kind kind, const std::string& raw) {
  if (is_text_kind(kind)) return Value(raw);
  if (raw.empty()) return std::nullopt;
  char* end = nullptr;
  const double x = std::strtod(raw.c_str(), &end);
  if (end != raw.c_str() + raw.size()) return std::nullopt;
  return Value(x);
}

std::string trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

// power_w needs the cost model's figures for that limit: none are extrapolated.
void check_power_limit_with(const PlatformSpec& spec,
                            const std::function<void(const std::string&, const std::string&)>& fail) {
  const double watts = spec.device.power_limit_w;
  if (watts <= 0) return;
  const PowerDerating& power = spec.cost.compute.power();
  if (power.empty())
    fail("power_w",
         fmt::format("the cost model \"{}\" has no figures for a power limit (compute.power)", spec.cost.name));
  if (watts > power.rated_w)
    fail("power_w", fmt::format("{:g} W is above the rated {:g} W of the cost model's device", watts, power.rated_w));
  if (watts < power.lowest_w())
    fail("power_w", fmt::format("{:g} W is below the lowest limit the cost model has a figure for ({:g} W)", watts,
                                power.lowest_w()));
}

// Checks that hold across options: sizes, and the kind the node count implies.
void finish(PlatformSpec& spec, const std::function<void(const std::string&, const std::string&)>& fail) {
  if (spec.preset == "cpu") {
    spec.kind = PlatformKind::cpu_host;
    spec.nodes = 1;
    return;
  }
  check_power_limit_with(spec, fail);
  const long long devices = static_cast<long long>(spec.nodes) * spec.gpus_per_node;
  if (devices > kMaxDevices)
    fail("nodes", fmt::format("{} nodes x {} GPUs = {} devices; at most {} are supported", spec.nodes,
                              spec.gpus_per_node, devices, kMaxDevices));
  spec.kind = spec.nodes > 1 ? PlatformKind::cluster : PlatformKind::node;
  if (spec.kind != PlatformKind::cluster) return;
  const long long per_leaf = static_cast<long long>(std::min(spec.nodes, spec.nodes_per_leaf)) * spec.gpus_per_node;
  if (per_leaf > kMaxGpusPerLeaf)
    fail("nodes_per_leaf", fmt::format("{} GPUs under one leaf switch; at most {} are supported (use smaller leaves: "
                                       "at oversub=1 the spine keeps them non-blocking)",
                                       per_leaf, kMaxGpusPerLeaf));
  const long long leaves = (spec.nodes + spec.nodes_per_leaf - 1) / spec.nodes_per_leaf;
  if (leaves > kMaxLeaves)
    fail("nodes_per_leaf",
         fmt::format("{} leaf switches; at most {} are supported (use larger leaves)", leaves, kMaxLeaves));
}

[[noreturn]] void option_error(const std::string& key, const std::string& message) {
  throw InputError(fmt::format("platform option {}: {}", key, message));
}

// "h100:nodes=4,nic=node".
PlatformSpec parse_preset_text(const std::string& text) {
  const auto colon = text.find(':');
  PlatformSpec spec = preset_spec(trim(text.substr(0, colon)));
  spec.name = text;
  const std::string name = spec.preset;
  const std::vector<Option>& options = options_for(name);
  if (colon == std::string::npos) {
    finish(spec, option_error);
    return spec;
  }
  std::set<std::string> seen;
  const std::string list = text.substr(colon + 1);
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    const std::string item = trim(list.substr(start, comma - start));
    start = comma + 1;
    const auto eq = item.find('=');
    if (eq == std::string::npos)
      throw InputError(
          fmt::format("platform option \"{}\": expected key=value (options: {})", item, option_names(options)));
    const std::string key = trim(item.substr(0, eq));
    const std::string raw = trim(item.substr(eq + 1));
    const Option* option = find_option(options, key);
    if (!option)
      option_error(key, fmt::format("unknown for preset {} (expected one of: {})", name, option_names(options)));
    if (!seen.insert(key).second) option_error(key, "given more than once");
    const std::optional<Value> value = parse_text_value(option->kind, raw);
    if (!value || !acceptable(option->kind, *value))
      option_error(key, fmt::format("expected {}, got \"{}\"", expectation(option->kind), raw));
    option->apply(spec, *value);
  }
  finish(spec, option_error);
  return spec;
}

// `cost_model:` in a description: a file (relative to the description's folder) or the model
// inline, applied over the preset's (or the `model=` option's) model.
void apply_cost_model_field(const core::JsonReader& node, const std::string& description, CostModel& cost) {
  if (node.is_object()) {
    cost.apply(node);
    return;
  }
  std::filesystem::path file = node.as_string();
  if (file.is_relative()) file = std::filesystem::path(description).parent_path() / file;
  std::error_code error;
  if (!std::filesystem::is_regular_file(file, error))
    node.fail(fmt::format("cannot read the cost-model file {}", file.string()));
  cost.apply_file(file.string());
}

// {"preset": "h100", "nodes": 4, "nic": "node", ...} in JSON or YAML.
PlatformSpec parse_description(const nlohmann::json& document, const std::string& path) {
  const core::JsonReader root(document, path);
  root.expect_object();
  const core::JsonReader preset = root.at("preset");
  PlatformSpec spec;
  try {
    spec = preset_spec(preset.as_string());
  } catch (const InputError& error) {
    preset.fail(error.what());
  }
  spec.name = path;
  const std::string name = spec.preset;
  const std::vector<Option>& options = options_for(name);
  for (const std::string& key : root.keys()) {
    if (key == "preset" || key == "cost_model") continue;
    const core::JsonReader node = root.at(key);
    const Option* option = find_option(options, key);
    if (!option)
      node.fail(fmt::format("unknown field (expected one of: preset, cost_model, {})", option_names(options)));
    Value value = is_text_kind(option->kind) ? Value(node.as_string()) : Value(node.as_number());
    if (!acceptable(option->kind, value)) {
      const std::string got = is_text_kind(option->kind) ? "\"" + text(value) + "\"" : fmt::format("{}", num(value));
      node.fail(fmt::format("expected {}, got {}", expectation(option->kind), got));
    }
    option->apply(spec, value);
  }
  if (root.has("cost_model")) apply_cost_model_field(root.at("cost_model"), path, spec.cost);
  finish(spec, [&](const std::string& key, const std::string& message) {
    throw InputError(fmt::format("{}: {}: {}", path, key, message));
  });
  return spec;
}

PlatformSpec parse_description_file(const std::string& path) {
  return parse_description(core::load_document(path), path);
}

PlatformSpec parse_xml(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error) || !std::ifstream(path))
    throw InputError(fmt::format("{}: cannot read platform file", path));
  // The devices come from the file; compute durations need a device model, and the H100 one is
  // the default (build_platform() leaves the XML's host speeds alone).
  PlatformSpec spec = preset_spec("h100");
  spec.name = path;
  spec.preset.clear();
  spec.kind = PlatformKind::xml;
  spec.xml_file = path;
  return spec;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && lower(s.substr(s.size() - suffix.size())) == suffix;
}

std::string gbps(double bytes_per_second) { return fmt::format("{:g} GB/s", bytes_per_second / kGB); }
std::string us(double seconds) { return fmt::format("{:g} us", seconds / kUs); }

std::string fabric_name(Fabric fabric) { return fabric == Fabric::fat_tree ? "fat-tree" : "spine-leaf"; }

// "989.4 TFLOP/s bf16, HBM 3350 GB/s, 80 GiB" (or the fp32 and DRAM figures of a CPU process).
std::string device_details(const DeviceSpec& device, bool gpu) {
  const double peak = device.peak_for(gpu ? DType::bfloat16 : DType::float32);
  const std::string power =
      device.power_limit_w > 0 ? fmt::format(", power limit {:g} W", device.power_limit_w) : std::string();
  return gpu ? fmt::format("{:g} TFLOP/s bf16, HBM {}, {:g} GiB{}", peak / 1e12, gbps(device.memory_bandwidth),
                           device.memory_bytes / kGiB, power)
             : fmt::format("{:g} GFLOP/s fp32, DRAM {}, {:g} GiB", peak / 1e9, gbps(device.memory_bandwidth),
                           device.memory_bytes / kGiB);
}

}  // namespace

PlatformSpec parse_platform(const std::string& text) {
  const std::string trimmed = trim(text);
  if (trimmed.empty()) throw InputError("platform: empty name (expected a preset, an .xml file or a .json/.yaml file)");
  if (ends_with(trimmed, ".xml")) return parse_xml(trimmed);
  if (ends_with(trimmed, ".json") || ends_with(trimmed, ".yaml") || ends_with(trimmed, ".yml"))
    return parse_description_file(trimmed);
  return parse_preset_text(trimmed);
}

void check_power_limit(const PlatformSpec& spec) { check_power_limit_with(spec, option_error); }

PlatformSpec platform_from_document(const nlohmann::json& document, const std::string& origin) {
  return parse_description(document, origin);
}

std::vector<PresetInfo> platform_presets() {
  const std::string gpu = option_names(gpu_options());
  return {
      {"a100", "NVIDIA A100-SXM4-80GB, 8 per node on NVSwitch (NVLink 300 GB/s), HDR 25 GB/s NIC per GPU", gpu},
      {"h100", "NVIDIA H100-SXM5-80GB, 8 per node on NVSwitch (NVLink 450 GB/s), NDR 50 GB/s NIC per GPU", gpu},
      {"h200", "NVIDIA H200-SXM-141GB, 8 per node on NVSwitch (NVLink 450 GB/s), NDR 50 GB/s NIC per GPU", gpu},
      {"cpu", "One CPU host, one process per rank, loopback TCP (Gloo-like) 5 GB/s per process, 20 GB/s shared",
       option_names(cpu_options())},
  };
}

std::string describe_platform(const PlatformSpec& spec) {
  switch (spec.kind) {
    case PlatformKind::xml:
      return fmt::format(
          "SimGrid platform {} (devices: its hosts in name order; compute modelled as {}; cost model {})",
          spec.xml_file, spec.device.name, spec.cost.name);
    case PlatformKind::cpu_host:
      return fmt::format(
          "{} processes on one CPU host{}, loopback {} per process, {} shared ({}; message latency {}, collective "
          "overhead {}; cost model {})",
          spec.gpus_per_node, spec.cores > 0 ? fmt::format(" of {} cores", spec.cores) : "",
          gbps(spec.nvlink_bandwidth), gbps(spec.loopback_bandwidth), device_details(spec.device, false),
          us(2 * spec.nvlink_latency), us(spec.collective_overhead), spec.cost.name);
    case PlatformKind::node:
      return fmt::format("1 x {} {}, NVLink {} ({}; NVLink latency {}, collective overhead {}; cost model {})",
                         spec.gpus_per_node, spec.device.name, gbps(spec.nvlink_bandwidth),
                         device_details(spec.device, true), us(2 * spec.nvlink_latency), us(spec.collective_overhead),
                         spec.cost.name);
    case PlatformKind::cluster:
      break;
  }
  const std::string nic = spec.nic_per_gpu ? fmt::format("1 NIC/GPU {}", gbps(spec.nic_bandwidth))
                                           : fmt::format("1 NIC/node {}", gbps(spec.nic_bandwidth));
  return fmt::format(
      "{} x {} {}, NVLink {}, {}, {} {:g}:1 ({} nodes per leaf; {}; latency NVLink {}, same leaf {}, across leaves "
      "{}; collective overhead {}; cost model {})",
      spec.nodes, spec.gpus_per_node, spec.device.name, gbps(spec.nvlink_bandwidth), nic, fabric_name(spec.fabric),
      spec.oversubscription, spec.nodes_per_leaf, device_details(spec.device, true), us(2 * spec.nvlink_latency),
      us(2 * spec.nic_latency + spec.switch_latency), us(2 * spec.nic_latency + 3 * spec.switch_latency),
      us(spec.collective_overhead), spec.cost.name);
}

}  // namespace stratsim::sim
