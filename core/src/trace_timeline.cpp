// A profiler trace as a timeline (trace_timeline.hpp): events lined up by position per stream
// across ranks, which is what the program's SPMD contract (one op list for every rank) needs.
#include "stratsim/core/trace_timeline.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>

#include "stratsim/core/run_analysis.hpp"

namespace stratsim::core {
namespace {

// One event of one rank on one program stream.
struct Item {
  bool collective = false;
  int index = 0;  // into the rank's collectives or activities
  double issue = 0, start = 0, end = 0;
  int step = -1;
  double key() const { return collective ? issue : start; }
};

// "pt_gloo_runloop (thread 4242)" -> "pt_gloo_runloop"; the second thread of that name on a rank
// -> "pt_gloo_runloop 2", so its events get a lane of their own and lanes read alike on all ranks.
std::string without_thread(const std::string& stream) {
  const std::size_t at = stream.rfind(" (thread ");
  return at == std::string::npos || !stream.ends_with(")") ? stream : stream.substr(0, at);
}

std::vector<std::string> program_stream_names(const RankTrace& rank) {
  std::vector<std::string> names;
  std::map<std::string, int> seen;
  for (const std::string& stream : rank.streams) {
    std::string name = without_thread(stream);
    const int n = ++seen[name];
    names.push_back(n == 1 ? name : fmt::format("{} {}", name, n));
  }
  return names;
}

// The program group for a trace group: the whole world, or runs of k consecutive ranks; other
// shapes (a strided group of a 2-D mesh) are drawn under the world group, their members kept in
// the run's collective instances.
int group_for(Program& program, const std::vector<int>& members, const std::string& name) {
  const int world = program.world_size;
  int group = program.group_id({0});
  const int k = static_cast<int>(members.size());
  if (k > 0 && k < world && world % k == 0) {
    std::vector<int> sorted = members;
    std::sort(sorted.begin(), sorted.end());
    bool run = sorted.front() % k == 0;
    for (int i = 1; i < k && run; ++i) run = sorted[i] == sorted[0] + i;
    if (run) group = program.group_id({0}, k);
  }
  if (k == world && !name.empty() && program.groups[group].name == "world") program.groups[group].name = name;
  return group;
}

}  // namespace

TraceTimeline trace_timeline(const ProfilerTrace& trace) {
  TraceTimeline out;
  Program& program = out.timeline.program;
  RunResult& result = out.timeline.result;
  program.world_size = std::max(1, trace.world_size);
  program.mesh = DeviceMesh({program.world_size}, {"world"});

  // Iterations: the profiled steps in order, over all ranks.
  std::map<int, int> iteration_of_step;
  for (const RankTrace& rank : trace.ranks)
    for (const TraceStep& s : rank.steps) iteration_of_step[s.number] = 0;
  int n = 0;
  for (auto& [step, iteration] : iteration_of_step) iteration = ++n;
  program.iterations = std::max(1, n);
  out.first_step = iteration_of_step.empty() ? 0 : iteration_of_step.begin()->first;
  out.iteration_of_step = iteration_of_step;
  // An event's iteration: its step's; outside every step (before the first, between two, after
  // the last: GPU work outlives the CPU's step span), the last step the rank began before it.
  const auto iteration = [&](const RankTrace& rank, const Item& item) {
    if (item.step >= 0 && iteration_of_step.contains(item.step)) return iteration_of_step[item.step];
    const auto after = std::upper_bound(rank.steps.begin(), rank.steps.end(), item.key(),
                                        [](double t, const TraceStep& s) { return t < s.start; });
    return after == rank.steps.begin() ? 1 : iteration_of_step[std::prev(after)->number];
  };

  // Per program stream, per rank: its events by start.
  std::map<int, std::vector<std::vector<Item>>> items;  // program stream -> [rank slot] -> items
  const std::size_t slots = trace.ranks.size();
  for (std::size_t slot = 0; slot < slots; ++slot) {
    const RankTrace& rank = trace.ranks[slot];
    // Compute keeps a lane per thread. Collectives share one lane per kind of thread: Gloo hands
    // each collective to whichever worker thread is free, differently on each rank, while every
    // rank issues its collectives in the same order (SPMD), which is what lines them up.
    // Streams are made as events need them, so a thread with only collectives has no empty lane.
    const std::vector<std::string> names = program_stream_names(rank);
    const auto lane = [&](const std::string& name) -> std::vector<Item>& {
      auto& ranks = items[program.stream_id(name)];
      ranks.resize(slots);
      return ranks[slot];
    };
    for (std::size_t i = 0; i < rank.collectives.size(); ++i) {
      const TraceCollective& c = rank.collectives[i];
      lane(without_thread(rank.streams[c.stream]))
          .push_back({true, static_cast<int>(i), c.issued, c.start, c.end, c.step});
    }
    for (std::size_t i = 0; i < rank.activities.size(); ++i) {
      const TraceActivity& a = rank.activities[i];
      lane(names[a.stream]).push_back({false, static_cast<int>(i), a.start, a.start, a.end, a.step});
    }
  }
  out.collective_ops.resize(slots);
  for (std::size_t slot = 0; slot < slots; ++slot)
    out.collective_ops[slot].assign(trace.ranks[slot].collectives.size(), -1);

  result.source = "pytorch-profiler";
  result.mode = "measured";
  result.world_size = program.world_size;
  for (const RankTrace& rank : trace.ranks) result.recorded.push_back({rank.rank});
  result.timings.assign(slots, {});
  std::vector<std::string> notes;
  for (auto& [stream, ranks] : items) {
    std::size_t longest = 0;
    for (auto& lane : ranks) {
      // collectives in issue order (the order every rank shares), compute by start: one key each,
      // so a lane holding both still sorts by a strict weak order
      std::stable_sort(lane.begin(), lane.end(), [](const Item& a, const Item& b) { return a.key() < b.key(); });
      longest = std::max(longest, lane.size());
    }
    int padded = 0;
    for (std::size_t position = 0; position < longest; ++position) {
      // The op: what the first rank with an event at this position ran there.
      std::size_t owner = 0;
      while (ranks[owner].size() <= position) ++owner;
      const Item& first = ranks[owner][position];
      ProgramOp op;
      op.stream = stream;
      op.iteration = iteration(trace.ranks[owner], first);
      if (first.collective) {
        const TraceCollective& c = trace.ranks[owner].collectives[first.index];
        op.name = c.name.substr(0, c.name.find('('));
        if (c.kind) {
          op.type = OpType::collective;
          op.kind = *c.kind;
          op.comm_key = c.comm_key;
          op.group = group_for(program, c.group.empty() ? std::vector<int>{} : c.group, c.group_name);
          op.bytes = std::max<std::int64_t>(0, c.bytes);
          op.input_bytes = std::max<std::int64_t>(0, c.input_bytes);
          op.output_bytes = std::max<std::int64_t>(0, c.output_bytes);
          if (const auto dtype = parse_dtype(c.dtype)) op.dtype = *dtype;
          op.reason = c.name;
        } else {
          op.op_class = "communication";  // a collective stratsim does not model (barrier)
        }
      } else {
        op.name = trace.ranks[owner].activities[first.index].name;
        op.op_class = "kernel";
      }
      const int id = program.add(std::move(op)).id;
      for (std::size_t slot = 0; slot < slots; ++slot) {
        auto& timings = result.timings[slot];
        timings.resize(program.ops.size());
        const std::vector<Item>& lane = ranks[slot];
        if (position < lane.size()) {
          const Item& item = lane[position];
          timings[id] = {item.issue, item.start, item.end};
          if (item.collective) out.collective_ops[slot][item.index] = id;
        } else {
          const double last = lane.empty() ? 0.0 : lane.back().end;
          timings[id] = {last, last, last};
          ++padded;
        }
      }
    }
    if (padded > 0)
      notes.push_back(
          fmt::format("{}: {} event positions some ranks lack, drawn as zero-length", program.streams[stream], padded));
  }
  for (auto& timings : result.timings) timings.resize(program.ops.size());

  // Collective instances: the ranks of one op in one trace group.
  std::vector<std::vector<std::pair<std::size_t, int>>> ran(program.ops.size());  // op -> (rank slot, collective)
  for (std::size_t slot = 0; slot < slots; ++slot)
    for (std::size_t i = 0; i < out.collective_ops[slot].size(); ++i)
      if (out.collective_ops[slot][i] >= 0) ran[out.collective_ops[slot][i]].emplace_back(slot, static_cast<int>(i));
  for (const ProgramOp& op : program.ops) {
    if (op.type != OpType::collective) continue;
    std::map<std::vector<int>, std::vector<std::size_t>> instances;  // members -> rank slots
    for (const auto& [slot, index] : ran[op.id]) {
      std::vector<int> members = trace.ranks[slot].collectives[index].group;
      // A group the trace names with ranks outside its world, or with a rank twice (a hand-edited
      // file), counts as unknown: the timeline's group sizes must fit its world.
      const bool inside =
          std::all_of(members.begin(), members.end(), [&](int r) { return r >= 0 && r < program.world_size; });
      const bool distinct = std::set<int>(members.begin(), members.end()).size() == members.size();
      if (members.empty() || !inside || !distinct) members = {trace.ranks[slot].rank};
      instances[members].push_back(slot);
    }
    int instance = 0;
    for (const auto& [members, member_slots] : instances) {
      CollectiveRun run;
      run.op = op.id;
      run.instance = instance++;
      run.algorithm = trace.ranks.front().backend.empty() ? "measured" : trace.ranks.front().backend;
      run.bytes = static_cast<double>(op.bytes);
      run.ranks = members;
      run.group_size = static_cast<int>(run.ranks.size());
      run.start = std::numeric_limits<double>::infinity();
      for (const std::size_t slot : member_slots) {
        run.start = std::min(run.start, result.timings[slot][op.id].start);
        run.end = std::max(run.end, result.timings[slot][op.id].end);
      }
      result.collectives.push_back(std::move(run));
    }
  }
  std::sort(result.collectives.begin(), result.collectives.end(), [](const CollectiveRun& a, const CollectiveRun& b) {
    return a.start != b.start ? a.start < b.start : a.op != b.op ? a.op < b.op : a.instance < b.instance;
  });

  result.iteration_end.assign(program.iterations, 0);
  for (std::size_t slot = 0; slot < slots; ++slot)
    for (const ProgramOp& op : program.ops) {
      const double end = result.timings[slot][op.id].end;
      result.iteration_end[op.iteration - 1] = std::max(result.iteration_end[op.iteration - 1], end);
      result.makespan = std::max(result.makespan, end);
    }
  for (std::size_t i = 1; i < result.iteration_end.size(); ++i)
    result.iteration_end[i] = std::max(result.iteration_end[i], result.iteration_end[i - 1]);

  const std::string backend = trace.ranks.empty() ? "" : trace.ranks.front().backend;
  result.platform = fmt::format("PyTorch profiler trace{}, {} of {} ranks", backend.empty() ? "" : " (" + backend + ")",
                                slots, program.world_size);
  if (n > 0)
    result.mode_notes.push_back(fmt::format("ProfilerStep#{}-{} as iterations 1-{}", iteration_of_step.begin()->first,
                                            iteration_of_step.rbegin()->first, n));
  result.notes = std::move(notes);
  return out;
}

}  // namespace stratsim::core
