// Reading Kineto traces (profiler_trace.hpp). One pass over traceEvents sorts the events into what
// the rest needs (steps, thread names, launches, record_param_comms, c10d calls, kernels, Gloo
// annotations, CPU ops); collectives and compute are then built from those, so the order of
// events in the file (Kineto writes CPU ops, then GPU activity, then annotations) does not matter.
#include "stratsim/core/profiler_trace.hpp"

#include <zlib.h>

#include <dirent.h>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "stratsim/core/errors.hpp"
#include "stratsim/core/json_reader.hpp"
#include "stratsim/core/limits.hpp"

namespace stratsim::core {
namespace {

using json = nlohmann::json;

std::string lowercase(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

bool starts_with(const std::string& text, const char* prefix) { return text.rfind(prefix, 0) == 0; }

// HTA's communication-kernel pattern (hta/common/types.py), NCCL's part of it.
bool is_nccl_kernel(const std::string& name) {
  return starts_with(name, "nccl") || name.find("ncclKernel") != std::string::npos ||
         name.find("ncclDevKernel") != std::string::npos;
}

// "allreduce", "all_reduce", "_allgather_base", "allgather_into_tensor_coalesced", "AllReduce"
// (from a kernel name), "reduce_scatter_tensor": one spelling per kind, or none for the
// collectives stratsim does not model (barrier, send, recv, gather, reduce).
std::optional<CollectiveKind> kind_of(const std::string& collective) {
  std::string key;
  for (const char c : lowercase(collective))
    if (c != '_') key += c;
  if (key.find("allreduce") != std::string::npos) return CollectiveKind::all_reduce;
  if (key.find("allgather") != std::string::npos) return CollectiveKind::all_gather;
  if (key.find("reducescatter") != std::string::npos) return CollectiveKind::reduce_scatter;
  if (key.find("broadcast") != std::string::npos) return CollectiveKind::broadcast;
  if (key.find("alltoall") != std::string::npos) return CollectiveKind::all_to_all;
  if (key == "scatter" || key == "scatterbase") return CollectiveKind::scatter;
  return std::nullopt;
}

// The operation a kernel name or a c10d/gloo name stands for, in one spelling, so a c10d call can
// be paired with the Gloo annotation it enqueued ("c10d::allreduce_" and "gloo:all_reduce").
std::string operation_key(const std::string& name) {
  const std::size_t colon = name.rfind(':');
  std::string key;
  for (const char c : lowercase(colon == std::string::npos ? name : name.substr(colon + 1)))
    if (c != '_') key += c;
  if (key.ends_with("base")) key.resize(key.size() - 4);
  return key;
}

// The collective a kernel name says: "ncclKernel_AllReduce_RING_LL_Sum_float(...)",
// "ncclDevKernel_AllGather_RING_LL", "ncclDevKernel_SendRecv".
std::string collective_from_kernel_name(const std::string& name) {
  static const char* const kinds[] = {"AllReduce", "AllGather", "ReduceScatter", "Broadcast", "SendRecv",
                                      "Reduce",    "Send",      "Recv",          "AllToAll"};
  for (const char* kind : kinds)
    if (name.find(kind) != std::string::npos) return lowercase(kind);
  return "nccl";
}

// Bytes per element for the dtype spellings traces use: record_param_comms ("Float", "BFloat16")
// and recorded input types ("float", "c10::BFloat16", "long int", "unsigned char").
std::optional<int> element_size(const std::string& dtype) {
  static const std::unordered_map<std::string, int> sizes = {
      {"float", 4},         {"float32", 4},     {"double", 8},        {"float64", 8},
      {"half", 2},          {"c10::half", 2},   {"float16", 2},       {"bfloat16", 2},
      {"c10::bfloat16", 2}, {"long", 8},        {"long int", 8},      {"int64", 8},
      {"int", 4},           {"int32", 4},       {"short", 2},         {"short int", 2},
      {"int16", 2},         {"byte", 1},        {"unsigned char", 1}, {"uint8", 1},
      {"char", 1},          {"signed char", 1}, {"int8", 1},          {"bool", 1},
      {"float8_e4m3fn", 1}, {"float8_e5m2", 1}, {"complexfloat", 8},  {"c10::complex<float>", 8}};
  const auto it = sizes.find(lowercase(dtype));
  if (it == sizes.end()) return std::nullopt;
  return it->second;
}

// A process group names each of its ranks once; a list that repeats one (a hand-edited or
// damaged trace) says nothing reliable about the group, so it reads as unknown.
std::vector<int> distinct_or_empty(std::vector<int> ranks) {
  if (std::set<int>(ranks.begin(), ranks.end()).size() != ranks.size()) return {};
  return ranks;
}

// "[0, 1, 2]" (record_param_comms writes the ranks as a string) or [0, 1, 2]; empty when absent,
// elided ("[0, 1, ...]"), or not a list of distinct ranks.
std::vector<int> rank_list(const json& value) {
  std::vector<int> ranks;
  if (value.is_array()) {
    for (const json& r : value)
      if (r.is_number_integer() && r.get<std::int64_t>() >= 0 && r.get<std::int64_t>() < kMaxRanks)
        ranks.push_back(r.get<int>());
      else return {};
    return distinct_or_empty(std::move(ranks));
  }
  if (!value.is_string()) return {};
  const std::string text = value.get<std::string>();
  if (text.find("...") != std::string::npos) return {};
  for (std::size_t i = 0; i < text.size();) {
    if (std::isdigit(static_cast<unsigned char>(text[i]))) {
      std::size_t end = i;
      while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
      if (end - i > 9) return {};
      ranks.push_back(std::stoi(text.substr(i, end - i)));
      i = end;
    } else {
      ++i;
    }
  }
  return distinct_or_empty(std::move(ranks));
}

std::int64_t nelems(const json& args, const char* key) {
  if (!args.contains(key) || !args[key].is_number_integer()) return -1;
  const std::int64_t n = args[key].get<std::int64_t>();
  return n >= 0 ? n : -1;
}

std::int64_t times(std::int64_t count, std::optional<int> size) {
  if (count < 0 || !size) return -1;
  return checked_product(count, *size).value_or(-1);
}

// program.hpp's logical bytes from the per-rank buffers.
std::int64_t logical_bytes(const TraceCollective& c) {
  if (!c.kind) return std::max(c.input_bytes, c.output_bytes);
  switch (*c.kind) {
    case CollectiveKind::all_gather:
      if (c.output_bytes >= 0) return c.output_bytes;
      if (c.input_bytes >= 0 && c.group_size > 0) return checked_product(c.input_bytes, c.group_size).value_or(-1);
      return -1;
    case CollectiveKind::scatter:
      return std::max(c.input_bytes, c.output_bytes);
    default:
      return c.input_bytes >= 0 ? c.input_bytes : c.output_bytes;
  }
}

// One "X" event's fields, checked.
struct Event {
  const json* value = nullptr;
  std::string name, category, lane;  // lane: "pid/tid"
  double ts = 0, dur = 0;
  const json& args() const {
    static const json empty = json::object();
    const auto it = value->find("args");
    return it != value->end() && it->is_object() ? *it : empty;
  }
};

std::string id_text(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_integer()) return std::to_string(value.get<std::int64_t>());
  if (value.is_number()) return fmt::format("{}", value.get<double>());
  return "";
}

// An event's pid or tid as text (numbers and strings both occur), "" when absent.
std::string id_of(const json& event, const char* key) {
  static const json none;
  const auto it = event.find(key);
  return id_text(it == event.end() ? none : *it);
}

// Microseconds a timestamp or duration may reach: 1e15 (31 years) keeps every sum and difference
// of them finite and exact to well under a nanosecond's worth of relative error.
constexpr double kMaxMicroseconds = 1e15;
bool within_time_limit(double us) { return std::isfinite(us) && std::fabs(us) <= kMaxMicroseconds; }

// The checks an "X" event must pass, with JsonReader's words and field path ("traceEvents[12].ts:
// expected a number"). Only run on an event that failed the fast checks in sort_event: building
// the path for each of millions of events would cost a third of the read.
[[noreturn]] void reject_event(const JsonReader& event) {
  event.expect_object();
  event.at("name").as_string();
  for (const char* key : {"ts", "dur"}) {
    if (!event.has(key) && std::string(key) == "dur") continue;
    if (!within_time_limit(event.at(key).as_number()))
      event.at(key).fail("expected microseconds within 1e15 (about 31 years)");
  }
  event.at("dur").fail("expected a duration of at least 0");
}

struct ProcessGroup {
  std::string name, description;
  std::vector<int> ranks;
};

// What one pass over traceEvents collects.
struct Sorted {
  std::vector<Event> steps, nccl_kernels, gpu_activity, gloo_annotations, c10d_calls, cpu_ops;
  std::unordered_map<std::string, std::string> thread_names;  // lane -> thread_name
  std::unordered_map<std::int64_t, double> launch_ts;         // correlation -> cudaLaunchKernel ts
  std::unordered_map<std::int64_t, const json*> comms_by_id;  // External id -> record_param_comms args
  double first_ts = std::numeric_limits<double>::infinity();
};

void sort_event(const JsonReader& events, std::size_t index, Sorted& sorted) {
  const json& value = events.value()[index];
  if (!value.is_object()) reject_event(events.at(index));
  const auto ph = value.find("ph");
  const std::string_view phase =
      ph != value.end() && ph->is_string() ? std::string_view(ph->get_ref<const std::string&>()) : std::string_view();
  if (phase == "M") {
    if (value.value("name", json()) == "thread_name" && value.contains("args") && value["args"].is_object() &&
        value["args"].contains("name") && value["args"]["name"].is_string())
      sorted.thread_names.emplace(id_of(value, "pid") + "/" + id_of(value, "tid"),
                                  value["args"]["name"].get<std::string>());
    return;
  }
  if (phase != "X") return;  // flows, instants, counters: nothing this reader needs
  const auto name = value.find("name"), category = value.find("cat"), ts = value.find("ts"), dur = value.find("dur");
  const bool valid = name != value.end() && name->is_string() && ts != value.end() && ts->is_number() &&
                     within_time_limit(ts->get<double>()) &&
                     (dur == value.end() || (dur->is_number() && within_time_limit(dur->get<double>()) && *dur >= 0));
  if (!valid) reject_event(events.at(index));
  Event event{&value,
              name->get<std::string>(),
              category != value.end() && category->is_string() ? category->get<std::string>() : std::string(),
              "",
              ts->get<double>(),
              dur == value.end() ? 0.0 : dur->get<double>()};
  event.lane = id_of(value, "pid") + "/" + id_of(value, "tid");
  sorted.first_ts = std::min(sorted.first_ts, event.ts);
  const std::string& cat = event.category;
  if (cat == "user_annotation" && starts_with(event.name, "ProfilerStep#")) sorted.steps.push_back(event);
  else if (cat == "kernel" && is_nccl_kernel(event.name)) sorted.nccl_kernels.push_back(event);
  else if (cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset") sorted.gpu_activity.push_back(event);
  else if (cat == "user_annotation" && starts_with(event.name, "gloo:")) sorted.gloo_annotations.push_back(event);
  else if (cat == "cuda_runtime" || cat == "cuda_driver") {
    const json& args = event.args();
    if (args.contains("correlation") && args["correlation"].is_number_integer())
      sorted.launch_ts.emplace(args["correlation"].get<std::int64_t>(), event.ts);
  } else if (cat == "cpu_op" && event.name == "record_param_comms") {
    const json& args = event.args();
    if (args.contains("External id") && args["External id"].is_number_integer())
      sorted.comms_by_id.emplace(args["External id"].get<std::int64_t>(), &args);
  } else if (cat == "cpu_op" && starts_with(event.name, "c10d::")) {
    sorted.c10d_calls.push_back(event);
    sorted.cpu_ops.push_back(event);
  } else if (cat == "cpu_op") {
    sorted.cpu_ops.push_back(event);
  }
}

class RankBuilder {
 public:
  RankBuilder(const json& document, std::string origin) : origin_(std::move(origin)) {
    trace_.file = origin_;
    read_distributed_info(document);
    // Nanoseconds since the epoch; up to the year 2262 fits, and the difference of two always does.
    if (document.contains("baseTimeNanoseconds") && document["baseTimeNanoseconds"].is_number_integer()) {
      const JsonReader base(document["baseTimeNanoseconds"], origin_, "baseTimeNanoseconds");
      const std::int64_t ns = base.as_int();
      if (ns < 0 || ns > std::int64_t{1} << 62) base.fail("expected nanoseconds since 1970, from 0 to 2^62");
      trace_.base_ns = ns;
    }
    const JsonReader events = JsonReader(document, origin_).at("traceEvents");
    events.expect_array();
    for (std::size_t i = 0; i < events.size(); ++i) sort_event(events, i, sorted_);
    if (sorted_.steps.empty())
      throw InputError(
          fmt::format("{}: no ProfilerStep#N annotations: profile with torch.profiler.profile(schedule=...) and call "
                      "prof.step() once per training step, so the trace says where each step starts",
                      origin_));
    trace_.first_ts_us = sorted_.first_ts;
  }

  bool rank_known() const { return rank_known_; }

  RankTrace build() {
    read_steps();
    read_nccl_kernels();
    read_gloo_annotations();
    read_activity();
    std::stable_sort(trace_.collectives.begin(), trace_.collectives.end(),
                     [](const TraceCollective& a, const TraceCollective& b) {
                       return a.issued != b.issued ? a.issued < b.issued : a.start < b.start;
                     });
    return std::move(trace_);
  }

 private:
  void read_distributed_info(const json& document) {
    if (!document.contains("distributedInfo")) return;
    const JsonReader info(document["distributedInfo"], origin_, "distributedInfo");
    info.expect_object();
    if (info.has("rank")) {
      const std::int64_t rank = info.at("rank").as_int();
      if (rank < 0 || rank >= kMaxRanks) info.at("rank").fail("expected a rank from 0 to 16777215");
      trace_.rank = static_cast<int>(rank);
      rank_known_ = true;
    }
    if (info.has("world_size")) {
      const std::int64_t world = info.at("world_size").as_int();
      if (world < 1 || world > kMaxRanks) info.at("world_size").fail("expected 1 to 16777216 ranks");
      trace_.world_size = static_cast<int>(world);
    }
    trace_.backend = info.get_string("backend", "");
    if (!info.has("pg_config") || !info.at("pg_config").is_array()) return;
    const JsonReader groups = info.at("pg_config");
    for (std::size_t i = 0; i < groups.size(); ++i) {
      const json& g = groups.at(i).value();
      if (!g.is_object()) continue;
      groups_.push_back({id_text(g.value("pg_name", json())), id_text(g.value("pg_desc", json())),
                         rank_list(g.value("ranks", json()))});
    }
  }

  double seconds(double ts) const { return (ts - sorted_.first_ts) * 1e-6; }

  int stream_of(const std::string& lane, const std::string& label) {
    const auto [it, added] = stream_by_lane_.emplace(lane, static_cast<int>(trace_.streams.size()));
    if (added) trace_.streams.push_back(label);
    return it->second;
  }
  int gpu_stream(const Event& event) {
    const json& args = event.args();
    const std::string stream =
        args.contains("stream") ? id_text(args["stream"]) : event.lane.substr(event.lane.find('/') + 1);
    const std::string device = id_of(*event.value, "pid");
    return stream_of(event.lane,
                     device == "0" || device.empty() ? "stream " + stream : "gpu " + device + " stream " + stream);
  }
  // "pt_gloo_runloop (thread 4242)" from Kineto's "thread 4242 (pt_gloo_runloop)": the name first,
  // so lanes of the same kind of thread read alike on every rank.
  int cpu_stream(const Event& event) {
    const std::string tid = event.lane.substr(event.lane.find('/') + 1);
    const auto it = sorted_.thread_names.find(event.lane);
    std::string name = it != sorted_.thread_names.end() ? it->second : "";
    if (const std::string prefix = "thread " + tid + " ("; starts_with(name, prefix.c_str()) && name.ends_with(")"))
      name = name.substr(prefix.size(), name.size() - prefix.size() - 1);
    return stream_of(event.lane, name.empty() || name == "thread " + tid ? "thread " + tid
                                                                         : fmt::format("{} (thread {})", name, tid));
  }

  void read_steps() {
    std::sort(sorted_.steps.begin(), sorted_.steps.end(), [](const Event& a, const Event& b) { return a.ts < b.ts; });
    for (const Event& e : sorted_.steps) {
      const std::string number = e.name.substr(std::string("ProfilerStep#").size());
      if (number.empty() || number.size() > 9 ||
          !std::all_of(number.begin(), number.end(), [](char c) { return c >= '0' && c <= '9'; }))
        throw InputError(
            fmt::format("{}: event \"{}\": expected ProfilerStep#N with N a step number", origin_, e.name));
      trace_.steps.push_back({std::stoi(number), seconds(e.ts), seconds(e.ts + e.dur)});
    }
  }

  // The step a time on the CPU falls in; -1 outside every step.
  int step_at(double t) const {
    const auto after = std::upper_bound(trace_.steps.begin(), trace_.steps.end(), t,
                                        [](double x, const TraceStep& s) { return x < s.start; });
    if (after == trace_.steps.begin()) return -1;
    const TraceStep& step = *std::prev(after);
    return t <= step.end ? step.number : -1;
  }

  // The process group: the ranks the event names, else the pg_config entry its name names, else
  // the only process group there is.
  void place_in_group(TraceCollective& c, const json& args, int stated_size) {
    c.group = args.contains("Process Group Ranks") ? rank_list(args["Process Group Ranks"]) : std::vector<int>{};
    if (args.contains("Process Group Name")) c.group_name = id_text(args["Process Group Name"]);
    if (c.group.empty() && !c.group_name.empty())
      for (const ProcessGroup& g : groups_)
        if (g.name == c.group_name) c.group = g.ranks;
    if (c.group.empty() && c.group_name.empty() && groups_.size() == 1) {
      c.group = groups_.front().ranks;
      c.group_name = groups_.front().name;
    }
    c.group_size = c.group.empty() ? stated_size : static_cast<int>(c.group.size());
  }

  void read_nccl_kernels() {
    for (const Event& e : sorted_.nccl_kernels) {
      const json* args = &e.args();
      if (!args->contains("Collective name") && args->contains("External id") &&
          (*args)["External id"].is_number_integer())
        if (const auto it = sorted_.comms_by_id.find((*args)["External id"].get<std::int64_t>());
            it != sorted_.comms_by_id.end())
          args = it->second;
      TraceCollective c;
      c.name = e.name;
      c.collective = args->contains("Collective name") && (*args)["Collective name"].is_string()
                         ? (*args)["Collective name"].get<std::string>()
                         : collective_from_kernel_name(e.name);
      c.kind = kind_of(c.collective);
      if (args->contains("Collective name"))
        c.comm_key = "c10d." + c.collective + (c.collective.ends_with("_") ? "" : "_");
      c.dtype = args->contains("dtype") && (*args)["dtype"].is_string() ? (*args)["dtype"].get<std::string>() : "";
      const std::optional<int> size = element_size(c.dtype);
      c.input_bytes = times(nelems(*args, "In msg nelems"), size);
      c.output_bytes = times(nelems(*args, "Out msg nelems"), size);
      const std::int64_t stated_size = nelems(*args, "Group size");
      place_in_group(c, *args, stated_size > 0 && stated_size <= kMaxRanks ? static_cast<int>(stated_size) : 0);
      c.bytes = logical_bytes(c);
      c.stream = gpu_stream(e);
      c.start = seconds(e.ts);
      c.end = seconds(e.ts + e.dur);
      c.issued = launched_at(e);
      c.step = step_at(c.issued);
      trace_.collectives.push_back(std::move(c));
    }
  }

  // Gloo runs each collective on a worker thread ("gloo:all_reduce", the real duration) after
  // the c10d call on the caller's thread enqueued it; the n-th call of an operation enqueued its
  // n-th run (the work queue is first in, first out).
  void read_gloo_annotations() {
    const auto by_start = [](const Event& a, const Event& b) { return a.ts < b.ts; };
    std::sort(sorted_.gloo_annotations.begin(), sorted_.gloo_annotations.end(), by_start);
    std::sort(sorted_.c10d_calls.begin(), sorted_.c10d_calls.end(), by_start);
    std::map<std::string, std::vector<const Event*>> calls;  // operation -> its calls, in order
    for (const Event& e : sorted_.c10d_calls) calls[operation_key(e.name)].push_back(&e);
    std::map<std::string, std::size_t> seen;
    for (const Event& e : sorted_.gloo_annotations) {
      const json& args = e.args();
      TraceCollective c;
      c.name = e.name;
      c.collective = e.name.substr(5);
      c.kind = kind_of(c.collective);
      // record_shapes=True gives the input's element type and shape.
      if (args.contains("Input type") && args["Input type"].is_array() && !args["Input type"].empty() &&
          args["Input type"][0].is_string())
        c.dtype = args["Input type"][0].get<std::string>();
      std::int64_t elements = -1;
      if (args.contains("Input Dims") && args["Input Dims"].is_array() && !args["Input Dims"].empty() &&
          args["Input Dims"][0].is_array()) {
        elements = 1;
        for (const json& d : args["Input Dims"][0]) {
          elements = d.is_number_integer() && d.get<std::int64_t>() >= 0
                         ? checked_product(elements, d.get<std::int64_t>()).value_or(-1)
                         : -1;
          if (elements < 0) break;  // unknown stays unknown (a later 0 must not make it 0)
        }
      }
      place_in_group(c, args, 0);
      c.input_bytes = times(elements, element_size(c.dtype));
      if (c.kind == CollectiveKind::all_gather && c.input_bytes >= 0 && c.group_size > 0)
        c.output_bytes = checked_product(c.input_bytes, c.group_size).value_or(-1);
      else if (c.kind == CollectiveKind::all_reduce || c.kind == CollectiveKind::broadcast)
        c.output_bytes = c.input_bytes;
      c.bytes = logical_bytes(c);
      c.stream = cpu_stream(e);
      c.start = seconds(e.ts);
      c.end = seconds(e.ts + e.dur);
      const std::string key = operation_key(e.name);
      const std::size_t n = seen[key]++;
      const auto call = calls.find(key);
      c.issued = c.start;
      if (call != calls.end() && n < call->second.size()) {
        const Event& enqueued = *call->second[n];
        c.issued = seconds(enqueued.ts);
        c.comm_key = "c10d." + enqueued.name.substr(std::string("c10d::").size());
      }
      c.step = step_at(c.issued);
      trace_.collectives.push_back(std::move(c));
    }
  }

  void read_activity() {
    std::vector<TraceActivity>& out = trace_.activities;
    if (!sorted_.gpu_activity.empty()) {
      // A kernel belongs to the step that launched it: the GPU runs behind the CPU, so a step's
      // last kernels often run after its ProfilerStep span has ended.
      for (const Event& e : sorted_.gpu_activity)
        out.push_back({e.name, gpu_stream(e), step_at(launched_at(e)), seconds(e.ts), seconds(e.ts + e.dur)});
    } else {
      // CPU-only: the outermost ops of each thread (an op's children are inside its span), less
      // the c10d calls, which are communication.
      std::sort(sorted_.cpu_ops.begin(), sorted_.cpu_ops.end(), [](const Event& a, const Event& b) {
        return a.lane != b.lane ? a.lane < b.lane : a.ts != b.ts ? a.ts < b.ts : a.dur > b.dur;
      });
      std::string lane;
      double covered_until = -std::numeric_limits<double>::infinity();
      for (const Event& e : sorted_.cpu_ops) {
        if (e.lane != lane) lane = e.lane, covered_until = -std::numeric_limits<double>::infinity();
        if (e.ts < covered_until) continue;
        covered_until = e.ts + e.dur;
        if (!starts_with(e.name, "c10d::"))
          out.push_back({e.name, cpu_stream(e), step_at(seconds(e.ts)), seconds(e.ts), seconds(e.ts + e.dur)});
      }
    }
    std::stable_sort(out.begin(), out.end(),
                     [](const TraceActivity& a, const TraceActivity& b) { return a.start < b.start; });
  }

  // When the CPU launched a GPU event (its cudaLaunchKernel, by correlation), else when it ran.
  double launched_at(const Event& e) const {
    const json& args = e.args();
    if (args.contains("correlation") && args["correlation"].is_number_integer())
      if (const auto it = sorted_.launch_ts.find(args["correlation"].get<std::int64_t>());
          it != sorted_.launch_ts.end())
        return seconds(it->second);
    return seconds(e.ts);
  }

  std::string origin_;
  RankTrace trace_;
  bool rank_known_ = false;
  std::vector<ProcessGroup> groups_;
  Sorted sorted_;
  std::unordered_map<std::string, int> stream_by_lane_;
};

// gzip's magic bytes, then zlib's inflate with gzip framing; the output is held to the document
// limit, so a small file that expands without end is refused, not followed.
std::string gunzip(const std::string& data, const std::string& path) {
  z_stream stream{};
  if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK) throw InputError(fmt::format("{}: cannot start gunzip", path));
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&stream, &inflateEnd);
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  stream.avail_in = static_cast<uInt>(data.size());
  std::string text;
  char buffer[1 << 16];
  for (int status = Z_OK; status != Z_STREAM_END;) {
    stream.next_out = reinterpret_cast<Bytef*>(buffer);
    stream.avail_out = sizeof buffer;
    status = inflate(&stream, Z_NO_FLUSH);
    if (status != Z_OK && status != Z_STREAM_END)
      throw InputError(fmt::format("{}: not valid gzip data ({})", path, stream.msg ? stream.msg : "truncated"));
    text.append(buffer, sizeof buffer - stream.avail_out);
    if (static_cast<std::int64_t>(text.size()) > kMaxDocumentBytes)
      throw InputError(fmt::format("{}: expands past 1 GiB (stratsim's limit per document)", path));
    if (status == Z_OK && stream.avail_in == 0 && stream.avail_out != 0)
      throw InputError(fmt::format("{}: truncated gzip data (the file ends before the compressed stream)", path));
  }
  return text;
}

std::vector<std::string> trace_files_in(const std::string& folder) {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(folder.c_str()), &::closedir);
  if (!dir) throw InputError(fmt::format("{}: cannot open folder", folder));
  std::vector<std::string> files;
  while (const dirent* entry = ::readdir(dir.get())) {
    const std::string name = entry->d_name;
    if (name.ends_with(".json") || name.ends_with(".json.gz"))
      files.push_back(folder + (folder.ends_with("/") ? "" : "/") + name);
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) throw InputError(fmt::format("{}: no .json or .json.gz profiler traces in this folder", folder));
  return files;
}

}  // namespace

bool is_profiler_trace(const json& document) {
  return document.is_object() && document.contains("traceEvents") && !document.contains("format");
}

RankTrace rank_trace_from_json(const json& document, const std::string& origin) {
  if (!is_profiler_trace(document))
    throw InputError(fmt::format(
        "{}: not a PyTorch profiler trace: expected Kineto's Chrome-trace JSON, an object with \"traceEvents\" "
        "(torch.profiler's export_chrome_trace)",
        origin));
  return RankBuilder(document, origin).build();
}

std::string maybe_gunzip(std::string data, const std::string& origin) {
  if (data.size() >= 2 && static_cast<unsigned char>(data[0]) == 0x1f && static_cast<unsigned char>(data[1]) == 0x8b)
    return gunzip(data, origin);
  return data;
}

std::string read_maybe_gzipped_file(const std::string& path) { return maybe_gunzip(read_text_file(path), path); }

ProfilerTrace read_profiler_trace(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const std::string& path : paths) {
    std::error_code ignored;
    if (std::filesystem::is_directory(path, ignored)) {
      const std::vector<std::string> inside = trace_files_in(path);
      files.insert(files.end(), inside.begin(), inside.end());
    } else {
      files.push_back(path);
    }
  }
  std::vector<RankTrace> ranks;
  for (const std::string& file : files) {
    const json document = parse_document(read_maybe_gzipped_file(file), file, false);
    if (!is_profiler_trace(document)) rank_trace_from_json(document, file);  // throws its error
    RankBuilder builder(document, file);
    if (!builder.rank_known() && files.size() > 1)
      throw InputError(
          fmt::format("{}: no distributedInfo.rank, so which rank it is cannot be told among {} files (profile after "
                      "torch.distributed.init_process_group)",
                      file, files.size()));
    ranks.push_back(builder.build());
  }
  return assemble_profiler_trace(std::move(ranks));
}

ProfilerTrace assemble_profiler_trace(std::vector<RankTrace> ranks) {
  ProfilerTrace trace;
  std::map<int, std::string> file_of_rank;
  for (RankTrace& rank : ranks) {
    if (const auto [it, added] = file_of_rank.emplace(rank.rank, rank.file); !added)
      throw InputError(
          fmt::format("{}: rank {} again ({} is rank {} too)", rank.file, rank.rank, it->second, rank.rank));
    trace.world_size = std::max(trace.world_size, rank.world_size);
    trace.ranks.push_back(std::move(rank));
  }
  if (trace.ranks.empty()) return trace;
  std::sort(trace.ranks.begin(), trace.ranks.end(),
            [](const RankTrace& a, const RankTrace& b) { return a.rank < b.rank; });
  if (trace.world_size == 0) trace.world_size = trace.ranks.back().rank + 1;
  for (const RankTrace& rank : trace.ranks)
    if (rank.rank >= trace.world_size)
      throw InputError(
          fmt::format("{}: distributedInfo.rank {} is past the world size {}", rank.file, rank.rank, trace.world_size));
  // One clock: each rank's times start at its first event; shift them by how much later that
  // was than the earliest rank's (nanoseconds apart as integers, so 1.8e18 ns bases lose nothing).
  const RankTrace& reference = trace.ranks.front();
  std::vector<double> offsets;
  for (const RankTrace& rank : trace.ranks)
    offsets.push_back(static_cast<double>(static_cast<long double>(rank.base_ns) - reference.base_ns) * 1e-9 +
                      (rank.first_ts_us - reference.first_ts_us) * 1e-6);
  const double earliest = *std::min_element(offsets.begin(), offsets.end());
  for (std::size_t i = 0; i < trace.ranks.size(); ++i) {
    const double shift = offsets[i] - earliest;
    RankTrace& rank = trace.ranks[i];
    for (TraceStep& s : rank.steps) s.start += shift, s.end += shift;
    for (TraceActivity& a : rank.activities) a.start += shift, a.end += shift;
    for (TraceCollective& c : rank.collectives) c.issued += shift, c.start += shift, c.end += shift;
  }
  return trace;
}

}  // namespace stratsim::core
