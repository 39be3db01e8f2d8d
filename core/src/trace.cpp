// The Chrome trace of a run, simulated or measured (Perfetto, chrome://tracing, HTA): a
// deterministic function of the program and the result (no wall time, no hashing order). The
// project's own timeline format is timeline.cpp.
//
// Chrome trace layout: one process per recorded rank (pid = the first rank it stands for), one
// thread per stream (tid = stream index + 1, so no stream gets tid 0), "X" slices with ts/dur in
// microseconds rounded to whole nanoseconds, v1 flow arrows ("s"/"f", cat "dep") for dependencies,
// and "wait <kind>" slices from a collective's issue to its start.
#include "stratsim/core/trace.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <utility>

#include "run_views.hpp"
#include "stratsim/core/run_analysis.hpp"

namespace stratsim::core {
namespace {

using json = nlohmann::json;
using detail::is_simulated;
using detail::ranks_of;

// Timestamps go through integer nanoseconds so that a slice's end and the next slice's start on the
// same stream print as the same number (no sub-ns overlap from floating-point noise).
std::int64_t to_ns(double seconds) { return std::llround(seconds * 1e9); }
double to_us(std::int64_t ns) { return static_cast<double>(ns) / 1000.0; }

int tid_of(int stream) { return stream + 1; }

// c10::ScalarType names, as Kineto writes them in the "dtype" arg of collectives.
std::string_view scalar_type_name(DType dtype) {
  switch (dtype) {
    case DType::float32:
      return "Float";
    case DType::float16:
      return "Half";
    case DType::bfloat16:
      return "BFloat16";
    case DType::float64:
      return "Double";
    case DType::int32:
      return "Int";
    case DType::int64:
      return "Long";
    case DType::int8:
      return "Char";
    case DType::uint8:
      return "Byte";
    case DType::bool_:
      return "Bool";
  }
  return "Float";
}

int pid_of(const RunResult& result, std::size_t s) { return ranks_of(result, s).front(); }

std::string process_name(const RunResult& result, std::size_t s) {
  const std::vector<int> ranks = ranks_of(result, s);
  if (result.mode == "representative") return "ranks " + describe_ranks(ranks) + " (representative)";
  if (ranks.size() == 1) return fmt::format("rank {}", ranks.front());
  return "ranks " + describe_ranks(ranks);
}

bool valid_op(const Program& program, const std::vector<OpTiming>& timings, int id) {
  return id >= 0 && static_cast<std::size_t>(id) < program.ops.size() && static_cast<std::size_t>(id) < timings.size();
}

// Events one per line: readable, greppable, and no giant json array held twice in memory.
class EventWriter {
 public:
  void add(const json& event) {
    out_ += first_ ? "\n" : ",\n";
    out_ += event.dump();
    first_ = false;
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
  bool first_ = true;
};

void metadata(EventWriter& w, const Program& program, const RunResult& result, std::size_t s) {
  const int pid = pid_of(result, s);
  w.add(
      {{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", process_name(result, s)}}}});
  w.add({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid}, {"tid", 0}, {"args", {{"sort_index", s}}}});
  for (std::size_t stream = 0; stream < program.streams.size(); ++stream) {
    const int tid = tid_of(static_cast<int>(stream));
    w.add({{"ph", "M"},
           {"name", "thread_name"},
           {"pid", pid},
           {"tid", tid},
           {"args", {{"name", program.streams[stream]}}}});
    w.add({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", pid}, {"tid", tid}, {"args", {{"sort_index", stream}}}});
  }
}

// Finds the group instance a rank took part in, for the collective's algorithm and group ranks.
class RunIndex {
 public:
  explicit RunIndex(const RunResult& result) : result_(result) {
    for (std::size_t i = 0; i < result.collectives.size(); ++i)
      for (int rank : result.collectives[i].ranks) index_.emplace(key(result.collectives[i].op, rank), i);
  }
  const CollectiveRun* find(int op, int rank) const {
    const auto it = index_.find(key(op, rank));
    return it == index_.end() ? nullptr : &result_.collectives[it->second];
  }

 private:
  static std::uint64_t key(int op, int rank) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(op)) << 32) | static_cast<std::uint32_t>(rank);
  }
  const RunResult& result_;
  std::unordered_map<std::uint64_t, std::size_t> index_;
};

json common_args(const ProgramOp& op) {
  return {{"op id", op.id},
          {"iteration", op.iteration},
          {"phase", phase_name(op.phase)},
          {"module", op.module},
          {"stream", tid_of(op.stream)}};
}

json compute_args(const ProgramOp& op) {
  json args = common_args(op);
  args["flops"] = op.flops;
  args["bytes"] = op.bytes_accessed;
  args["op_class"] = op.op_class;
  return args;
}

// The Kineto comm args (what record_param_comms and NCCL kernels carry) plus the run's own.
json collective_args(const Program& program, const ProgramOp& op, const CollectiveRun* run) {
  json args = common_args(op);
  const int element = std::max(1, dtype_size(op.dtype));
  const bool has_group = op.group >= 0 && static_cast<std::size_t>(op.group) < program.groups.size();
  args["Collective name"] = collective_kind_name(op.kind);
  args["In msg nelems"] = op.input_bytes / element;
  args["Out msg nelems"] = op.output_bytes / element;
  args["Group size"] = run ? run->group_size : (has_group ? program.groups[op.group].size : 1);
  args["dtype"] = scalar_type_name(op.dtype);
  args["Process Group Name"] = detail::group_name(program, op);
  args["bytes"] = op.bytes;
  args["reason"] = op.reason;
  if (run) {
    args["algorithm"] = run->algorithm;
    args["instance"] = run->instance;
  }
  return args;
}

std::string collective_event_name(const ProgramOp& op) { return fmt::format("nccl:{}", collective_kind_name(op.kind)); }

json slice(const std::string& name, const char* cat, int pid, int tid, std::int64_t start, std::int64_t end) {
  return {{"ph", "X"},
          {"name", name},
          {"cat", cat},
          {"pid", pid},
          {"tid", tid},
          {"ts", to_us(start)},
          {"dur", to_us(std::max<std::int64_t>(0, end - start))}};
}

// Slices of one recorded rank. A collective's wait slice starts no earlier than the previous slice
// on its stream ended, so slices on one thread never partially overlap.
void slices(EventWriter& w, const Program& program, const RunResult& result, const RunIndex& runs, std::size_t s) {
  const std::vector<OpTiming>& timings = result.timings[s];
  const int pid = pid_of(result, s);
  std::vector<std::int64_t> stream_end(program.streams.size(), 0);
  for (const ProgramOp& op : program.ops) {
    if (!valid_op(program, timings, op.id)) continue;
    const OpTiming& t = timings[op.id];
    const int tid = tid_of(op.stream);
    const std::int64_t start = to_ns(t.start), end = std::max(start, to_ns(t.end));
    std::int64_t previous_end = 0;
    if (op.stream >= 0 && static_cast<std::size_t>(op.stream) < stream_end.size())
      previous_end = std::exchange(stream_end[op.stream], std::max(stream_end[op.stream], end));
    if (op.type == OpType::compute) {
      json event = slice(op.name, "kernel", pid, tid, start, end);
      event["args"] = compute_args(op);
      w.add(event);
      continue;
    }
    const std::int64_t issue = std::max(to_ns(t.issue), previous_end);
    if (issue < start) {
      json wait = slice(fmt::format("wait {}", collective_kind_name(op.kind)), "wait", pid, tid, issue, start);
      wait["args"] = {{"op id", op.id}, {"name", op.name}};
      w.add(wait);
    }
    json event = slice(collective_event_name(op), "kernel", pid, tid, start, end);
    event["args"] = collective_args(program, op, runs.find(op.id, pid));
    event["args"]["name"] = op.name;
    w.add(event);
  }
}

// v1 flows: "s" 1 ns inside the end of the dependency's slice and "f" (binding to the enclosing
// slice) 1 ns inside the start of the dependent's, so viewers bind each end to the right slice
// even where slices touch.
void flows(EventWriter& w, const Program& program, const RunResult& result, std::size_t s, std::int64_t& next_id) {
  const std::vector<OpTiming>& timings = result.timings[s];
  const int pid = pid_of(result, s);
  for (const ProgramOp& op : program.ops) {
    if (!valid_op(program, timings, op.id)) continue;
    for (int dep : op.deps) {
      if (!valid_op(program, timings, dep)) continue;
      const ProgramOp& from = program.ops[dep];
      const std::int64_t from_start = to_ns(timings[dep].start), from_end = to_ns(timings[dep].end);
      const std::int64_t to_start = to_ns(timings[op.id].start), to_end = to_ns(timings[op.id].end);
      const std::int64_t id = next_id++;
      w.add({{"ph", "s"},
             {"id", id},
             {"name", "dep"},
             {"cat", "dep"},
             {"pid", pid},
             {"tid", tid_of(from.stream)},
             {"ts", to_us(std::max(from_start, from_end - 1))}});
      w.add({{"ph", "f"},
             {"bp", "e"},
             {"id", id},
             {"name", "dep"},
             {"cat", "dep"},
             {"pid", pid},
             {"tid", tid_of(op.stream)},
             {"ts", to_us(std::min(std::max(to_start, to_end), to_start + 1))}});
    }
  }
}

}  // namespace

std::string chrome_trace(const Program& program, const RunResult& result) {
  EventWriter w;
  const RunIndex runs(result);
  for (std::size_t s = 0; s < result.timings.size(); ++s) metadata(w, program, result, s);
  std::int64_t next_id = 1;
  for (std::size_t s = 0; s < result.timings.size(); ++s) {
    slices(w, program, result, runs, s);
    flows(w, program, result, s, next_id);
  }
  json other = {{"generator", "stratsim"}, {"platform", result.platform}, {"mode", result.mode}};
  if (is_simulated(result)) other["simulated_ranks"] = result.timings.size();
  else other.update({{"source", result.source}, {"recorded_ranks", result.timings.size()}});
  // Written by hand so that "rank": 0 has the space HTA's regex "rank":\s+(\d+) requires.
  std::string out = fmt::format(
      "{{\"displayTimeUnit\": \"ms\", \"distributedInfo\": {{\"rank\": 0, \"world_size\": {}}}, "
      "\"otherData\": {}, \"traceEvents\": [",
      result.world_size, other.dump());
  out += w.take();
  out += "\n]}\n";
  return out;
}

}  // namespace stratsim::core
