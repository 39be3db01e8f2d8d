// Collective matching (op_matching.hpp). Per rank, both sides' collectives are put in queues keyed
// by (group members, iteration, kind), in issue order; the k-th of a queue meets the k-th of its
// counterpart, and bytes decide whether they are the same collective. Keying by kind as well as
// group means one missing collective shifts only the ones of its own kind, not every later one.
#include "stratsim/core/op_matching.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "stratsim/core/errors.hpp"
#include "stratsim/core/report.hpp"
#include "stratsim/core/run_analysis.hpp"

namespace stratsim::core {
namespace {

using json = nlohmann::json;

// Interns names (groups by their sorted members, labels, streams) into a side's tables.
template <typename Key>
class Interner {
 public:
  explicit Interner(std::vector<Key>& table) : table_(table) {}
  std::int32_t operator()(const Key& key) {
    const auto [it, added] = index_.emplace(key, static_cast<std::int32_t>(table_.size()));
    if (added) table_.push_back(key);
    return it->second;
  }

 private:
  std::vector<Key>& table_;
  std::map<Key, std::int32_t> index_;
};

std::string kind_text(const CollectiveSide& side, const SideCollective& c) {
  if (c.kind >= 0) return std::string(collective_kind_name(static_cast<CollectiveKind>(c.kind)));
  const std::string& name = side.unmodelled_kinds[c.label];
  return name.empty() ? "unknown" : name;
}

std::string group_text(const CollectiveSide& side, std::int32_t group) {
  if (group < 0) return "an unnamed group";
  const std::string& name = side.group_names[group];
  return fmt::format("{}[{}]", name.empty() ? "" : name + " ", describe_ranks(side.groups[group]));
}

std::string bytes_text(std::int64_t bytes) {
  if (bytes < 0) return "unknown bytes";
  return bytes < 1024 ? fmt::format("{} B", bytes) : format_bytes(bytes);
}

// The pairing of iterations: by number when every measured iteration is one the prediction has
// (a trace of steps 0..2 against a 3-iteration simulation), otherwise the last k of each in order:
// steady state is at the end of both runs.
std::vector<std::pair<int, int>> pair_iterations(const std::set<int>& predicted, const std::set<int>& measured,
                                                 std::string& alignment) {
  std::vector<std::pair<int, int>> pairs;
  if (measured.empty() || predicted.empty()) {
    alignment = "no iterations to pair";
    return pairs;
  }
  if (std::includes(predicted.begin(), predicted.end(), measured.begin(), measured.end())) {
    for (const int i : measured) pairs.emplace_back(i, i);
    alignment = fmt::format("by number: iterations {}", describe_ranks({measured.begin(), measured.end()}));
    return pairs;
  }
  const std::size_t k = std::min(predicted.size(), measured.size());
  auto p = std::prev(predicted.end(), static_cast<std::ptrdiff_t>(k));
  auto m = std::prev(measured.end(), static_cast<std::ptrdiff_t>(k));
  for (std::size_t i = 0; i < k; ++i, ++p, ++m) pairs.emplace_back(*p, *m);
  alignment = fmt::format(
      "the last {} of each: predicted iterations {} with measured {} (the measured steps are not all "
      "iterations the prediction has; simulate more iterations to pair them by number)",
      k, describe_ranks({std::prev(predicted.end(), static_cast<std::ptrdiff_t>(k)), predicted.end()}),
      describe_ranks({std::prev(measured.end(), static_cast<std::ptrdiff_t>(k)), measured.end()}));
  return pairs;
}

std::set<int> iterations_of(const CollectiveSide& side) {
  std::set<int> out;
  for (const auto& [iteration, time] : side.step_times) out.insert(iteration);
  for (const auto& rank : side.by_rank)
    for (const SideCollective& c : rank)
      if (c.iteration >= 0) out.insert(c.iteration);
  return out;
}

// A group id both sides share: the sorted member list.
class CommonGroups {
 public:
  std::vector<std::int32_t> map(const CollectiveSide& side) {
    std::vector<std::int32_t> out;
    for (const std::vector<int>& members : side.groups) out.push_back(intern_(members));
    return out;
  }

 private:
  std::vector<std::vector<int>> table_;
  Interner<std::vector<int>> intern_{table_};
};

struct Queues {
  std::unordered_map<std::uint64_t, std::vector<std::int32_t>> by_key;
  std::vector<std::uint64_t> key_order;  // first appearance, for deterministic output
  void add(std::uint64_t key, std::int32_t index) {
    auto [it, added] = by_key.try_emplace(key);
    if (added) key_order.push_back(key);
    it->second.push_back(index);
  }
};

// (group + 1: 24 bits, iteration: 32 bits, kind + 1: 8 bits); iterations are below 2^30
// (ProfilerStep numbers of at most 9 digits, plus one), groups fewer than 2^24 per comparison.
std::uint64_t queue_key(std::int32_t group, int iteration, int kind) {
  return (static_cast<std::uint64_t>(group + 1) << 40) | (static_cast<std::uint64_t>(iteration & 0xffffffff) << 8) |
         static_cast<std::uint64_t>(kind + 1);
}

class Matcher {
 public:
  Matcher(const CollectiveSide& predicted, const CollectiveSide& measured, OpComparison& out)
      : p_(predicted), m_(measured), out_(out) {
    p_groups_ = groups_.map(p_);
    m_groups_ = groups_.map(m_);
    out_.iterations = pair_iterations(iterations_of(p_), iterations_of(m_), out_.alignment);
    for (const auto& [pi, mi] : out_.iterations) predicted_of_[mi] = pi, measured_of_[pi] = mi;
  }

  void run() {
    for (std::size_t r = 0; r < m_.ranks.size(); ++r) match_rank(static_cast<int>(r));
    std::vector<int> missing;
    for (const int rank : p_.ranks)
      if (!std::binary_search(m_.ranks.begin(), m_.ranks.end(), rank)) missing.push_back(rank);
    if (!missing.empty())
      out_.notes.push_back(fmt::format("{} has no rank {}: their predicted collectives are not compared", m_.file,
                                       describe_ranks(missing)));
    if (!ungrouped_ranks_.empty())
      out_.notes.push_back(
          fmt::format("{} does not name the process group of every collective on rank {}: there "
                      "they are matched by kind and order over all groups",
                      m_.file, describe_ranks(ungrouped_ranks_)));
  }

 private:
  void unmatched(bool predicted_side, int rank, std::int32_t index, std::string reason) {
    out_.unmatched.push_back({predicted_side, rank, index, std::move(reason)});
  }

  void match_rank(int measured_slot) {
    const int rank = m_.ranks[measured_slot];
    const std::vector<SideCollective>& measured = m_.by_rank[measured_slot];
    const auto it = std::lower_bound(p_.ranks.begin(), p_.ranks.end(), rank);
    if (it == p_.ranks.end() || *it != rank) {
      for (std::size_t i = 0; i < measured.size(); ++i)
        if (in_compared_iteration(measured[i]))
          ++out_.measured_compared,
              unmatched(false, rank, static_cast<std::int32_t>(i),
                        fmt::format("rank {} is not in {} ({} ranks)", rank, p_.file, p_.world_size));
      return;
    }
    const std::vector<SideCollective>& predicted = p_.by_rank[it - p_.ranks.begin()];
    // Without group names on this rank (a Gloo trace with several process groups), its collectives
    // are matched by kind and order over all groups at once.
    const auto grouped = [](const SideCollective& c) { return c.group >= 0 || c.kind < 0; };
    const bool by_group = std::all_of(measured.begin(), measured.end(), grouped) &&
                          std::all_of(predicted.begin(), predicted.end(), grouped);
    if (!by_group) ungrouped_ranks_.push_back(rank);
    Queues pq, mq;
    for (std::size_t i = 0; i < predicted.size(); ++i) {
      const SideCollective& c = predicted[i];
      if (!measured_of_.contains(c.iteration)) continue;
      ++out_.predicted_compared;
      if (c.kind < 0) {  // a predicted side read from a trace can hold them too
        unmatched(true, rank, static_cast<std::int32_t>(i),
                  fmt::format("{}: not a collective stratsim models", kind_text(p_, c)));
        continue;
      }
      pq.add(queue_key(by_group && c.group >= 0 ? p_groups_[c.group] : -1, c.iteration, c.kind),
             static_cast<std::int32_t>(i));
    }
    for (std::size_t i = 0; i < measured.size(); ++i) {
      const SideCollective& c = measured[i];
      const auto index = static_cast<std::int32_t>(i);
      if (c.iteration < 0) {
        unmatched(false, rank, index, "issued outside every profiled step (no ProfilerStep#N encloses it)");
        continue;
      }
      const auto paired = predicted_of_.find(c.iteration);
      if (paired == predicted_of_.end()) {
        unmatched(false, rank, index,
                  fmt::format("measured iteration {} is not paired with a predicted one", c.iteration));
        continue;
      }
      ++out_.measured_compared;
      if (c.kind < 0) {
        unmatched(false, rank, index, fmt::format("{}: not a collective stratsim models", kind_text(m_, c)));
        continue;
      }
      mq.add(queue_key(by_group && c.group >= 0 ? m_groups_[c.group] : -1, paired->second, c.kind), index);
    }
    for (const std::uint64_t key : pq.key_order) {
      const auto m = mq.by_key.find(key);
      pair_queue(rank, predicted, measured, pq.by_key[key], m == mq.by_key.end() ? nullptr : &m->second);
    }
    for (const std::uint64_t key : mq.key_order)
      if (!pq.by_key.contains(key)) pair_queue(rank, predicted, measured, {}, &mq.by_key[key]);
  }

  bool in_compared_iteration(const SideCollective& c) const { return predicted_of_.contains(c.iteration); }

  void pair_queue(int rank, const std::vector<SideCollective>& predicted, const std::vector<SideCollective>& measured,
                  const std::vector<std::int32_t>& pq, const std::vector<std::int32_t>* mq) {
    const std::size_t mn = mq ? mq->size() : 0, common = std::min(pq.size(), mn);
    for (std::size_t k = 0; k < common; ++k) {
      const SideCollective &pc = predicted[pq[k]], &mc = measured[(*mq)[k]];
      if (pc.bytes == mc.bytes || pc.bytes < 0 || mc.bytes < 0) {  // unknown bytes do not refuse a pair
        out_.matched.push_back(
            {rank, pc.iteration, mc.iteration, static_cast<int>(k), pq[k], (*mq)[k], pc.duration(), mc.duration()});
        continue;
      }
      const std::string what =
          fmt::format("{} #{} on {} in iteration {}: bytes differ (predicted {}, measured {})", kind_text(p_, pc),
                      k + 1, group_text(p_, pc.group), pc.iteration, bytes_text(pc.bytes), bytes_text(mc.bytes));
      unmatched(true, rank, pq[k], what);
      unmatched(false, rank, (*mq)[k], what);
    }
    const SideCollective& any = pq.empty() ? measured[mq->front()] : predicted[pq.front()];
    const CollectiveSide& side = pq.empty() ? m_ : p_;
    const std::string where = fmt::format("{} on {} in iteration {}", kind_text(side, any), group_text(side, any.group),
                                          pq.empty() ? predicted_of_.at(any.iteration) : any.iteration);
    for (std::size_t k = common; k < pq.size(); ++k)
      unmatched(true, rank, pq[k],
                fmt::format("no counterpart: predicted has {} {}, measured {}", pq.size(), where, mn));
    for (std::size_t k = common; k < mn; ++k)
      unmatched(false, rank, (*mq)[k],
                fmt::format("no counterpart: measured has {} {}, predicted {}", mn, where, pq.size()));
  }

  const CollectiveSide &p_, &m_;
  OpComparison& out_;
  CommonGroups groups_;
  std::vector<std::int32_t> p_groups_, m_groups_;
  std::map<int, int> predicted_of_, measured_of_;  // measured -> predicted iteration, and back
  std::vector<int> ungrouped_ranks_;
};

void summarise(OpComparison& out, const CollectiveSide& p, const CollectiveSide& m) {
  out.overall = summarise_errors("all", out.matched);
  std::map<std::pair<int, int>, std::vector<MatchedCollective>> by_kind_size;  // (kind, log4 size) -> pairs
  std::map<std::string, std::vector<MatchedCollective>> by_stream;
  for (const MatchedCollective& pair : out.matched) {
    const int pr = static_cast<int>(std::lower_bound(p.ranks.begin(), p.ranks.end(), pair.rank) - p.ranks.begin());
    const int mr = static_cast<int>(std::lower_bound(m.ranks.begin(), m.ranks.end(), pair.rank) - m.ranks.begin());
    const SideCollective &pc = p.by_rank[pr][pair.predicted], &mc = m.by_rank[mr][pair.measured];
    const std::int64_t bytes = pc.bytes >= 0 ? pc.bytes : mc.bytes;
    int bucket = bytes < 0 ? -1 : 0;  // -1: neither side knows
    for (std::int64_t limit = 1024; bucket >= 0 && bucket < 16 && bytes >= limit; limit *= 4) ++bucket;
    by_kind_size[{pc.kind, bucket}].push_back(pair);
    by_stream[fmt::format("{} | {}", p.streams[pc.stream], m.streams[mc.stream])].push_back(pair);
  }
  for (const auto& [key, pairs] : by_kind_size) {
    const std::int64_t low = key.second <= 0 ? key.second : std::int64_t{1024} << (2 * (key.second - 1));
    out.by_kind_size.push_back(summarise_errors(
        fmt::format("{} {}", collective_kind_name(static_cast<CollectiveKind>(key.first)), size_bucket(low)), pairs));
  }
  for (const auto& [label, pairs] : by_stream) out.by_stream.push_back(summarise_errors(label, pairs));
  for (const auto& [pi, mi] : out.iterations) {
    const auto ps = p.step_times.find(pi), ms = m.step_times.find(mi);
    if (ps != p.step_times.end() && ms != m.step_times.end())
      out.steps.push_back(
          {std::to_string(pi), pi == mi ? "" : fmt::format("measured iteration {}", mi), ps->second, ms->second});
  }
}

const SideCollective& collective_at(const CollectiveSide& side, int rank, std::int32_t index) {
  const auto slot = std::lower_bound(side.ranks.begin(), side.ranks.end(), rank) - side.ranks.begin();
  return side.by_rank[slot][index];
}

void summary_table(std::ostringstream& out, const std::string& title, const std::vector<ErrorSummary>& rows) {
  out << "\n" << title << ":\n";
  out << fmt::format("  {:<40}  {:>6}  {:>12}  {:>12}  {:>10}  {:>12}\n", "", "count", "predicted", "measured",
                     "mean |err|", "geomean |err|");
  for (const ErrorSummary& s : rows)
    out << fmt::format("  {:<40}  {:>6}  {:>12}  {:>12}  {:>10}  {:>12}\n", s.label.substr(0, 40), s.count,
                       format_seconds(s.count ? s.predicted_total / s.count : 0),
                       format_seconds(s.count ? s.measured_total / s.count : 0),
                       format_error_magnitude(s.mean_abs_error), format_error_magnitude(s.geomean_abs_error));
}

json summary_json(const ErrorSummary& s) {
  return {{"label", s.label},
          {"count", s.count},
          {"predicted_total_s", s.predicted_total},
          {"measured_total_s", s.measured_total},
          {"mean_abs_error", error_json(s.mean_abs_error)},
          {"geomean_abs_error", error_json(s.geomean_abs_error)}};
}

}  // namespace

std::optional<double> MatchedCollective::error() const {
  if (measured_duration == 0) return std::nullopt;
  return (predicted_duration - measured_duration) / measured_duration;
}

std::string size_bucket(std::int64_t bytes) {
  static const char* const units[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 0) return "of unknown size";
  if (bytes < 1024) return "< 1 KiB";
  if (bytes >= std::int64_t{1} << 40) return ">= 1 TiB";
  int power = 0;  // bytes in [1024 * 4^power, 1024 * 4^(power+1))
  while (bytes >= (std::int64_t{1024} << (2 * (power + 1)))) ++power;
  const auto low = [&](int p) { return fmt::format("{} {}", 1 << ((2 * p) % 10), units[(2 * p) / 10]); };
  return fmt::format("{} - {}", low(power), low(power + 1));
}

ErrorSummary summarise_errors(std::string label, const std::vector<MatchedCollective>& pairs) {
  ErrorSummary s;
  s.label = std::move(label);
  double abs_total = 0, log_total = 0;
  int with_error = 0;
  for (const MatchedCollective& pair : pairs) {
    ++s.count;
    s.predicted_total += pair.predicted_duration;
    s.measured_total += pair.measured_duration;
    if (const auto error = pair.error()) {
      ++with_error;
      abs_total += std::fabs(*error);
      log_total += std::log(std::max(std::fabs(*error), 1e-9));
    }
  }
  if (with_error > 0) {
    s.mean_abs_error = abs_total / with_error;
    s.geomean_abs_error = std::exp(log_total / with_error);
  }
  return s;
}

CollectiveSide timeline_side(const Timeline& timeline, const std::string& file, const std::vector<int>& wanted) {
  const Program& program = timeline.program;
  const RunResult& result = timeline.result;
  CollectiveSide side;
  side.file = file;
  side.world_size = program.world_size;
  side.description = fmt::format("{} ({}), {} ranks", result.source, result.mode, program.world_size);
  side.streams = program.streams;
  for (const ProgramOp& op : program.ops) side.labels.push_back(op.name);
  side.unmodelled_kinds.assign(side.labels.size(), "");
  // rank -> its recorded rank
  std::vector<int> recorded_of(static_cast<std::size_t>(program.world_size), -1);
  for (std::size_t e = 0; e < result.recorded.size(); ++e)
    for (const int r : result.recorded[e])
      if (r >= 0 && r < program.world_size) recorded_of[r] = static_cast<int>(e);
  std::vector<int> ranks = wanted;
  if (ranks.empty())
    for (const std::vector<int>& members : result.recorded)
      if (!members.empty()) ranks.push_back(members.front());
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::vector<int> collective_ops;
  for (const ProgramOp& op : program.ops)
    if (op.type == OpType::collective) collective_ops.push_back(op.id);
  Interner<std::vector<int>> groups(side.groups);
  Interner<std::string> keys(side.comm_keys);
  std::vector<std::int32_t> key_of(program.ops.size(), 0);
  for (const int id : collective_ops) key_of[id] = keys(program.ops[id].comm_key);
  std::map<std::vector<int>, std::string> names;
  for (const int rank : ranks) {
    if (rank < 0 || rank >= program.world_size || recorded_of[rank] < 0) continue;
    const std::vector<OpTiming>& timings = result.timings[recorded_of[rank]];
    std::vector<std::int32_t> group_of(program.groups.size(), -1);  // program group -> side group, for this rank
    for (std::size_t g = 0; g < program.groups.size(); ++g) {
      std::vector<int> members = program.group_ranks(static_cast<int>(g), rank);
      std::sort(members.begin(), members.end());
      group_of[g] = groups(members);
      names.emplace(members, program.groups[g].name);
    }
    std::vector<SideCollective>& out = side.by_rank.emplace_back();
    out.reserve(collective_ops.size());
    for (const int id : collective_ops) {
      const ProgramOp& op = program.ops[id];
      const OpTiming& t = timings[id];
      out.push_back({op.group >= 0 ? group_of[op.group] : -1, op.iteration, op.stream, id, id, key_of[id],
                     static_cast<std::int8_t>(op.kind), op.bytes, t.issue, t.end});
    }
    side.ranks.push_back(rank);
  }
  for (const std::vector<int>& members : side.groups) side.group_names.push_back(names[members]);
  for (const IterationStats& it : analyse(program, result, timeline.workload).iterations)
    side.step_times[it.iteration] = it.step_time;
  side.step_source = "the analysis's step time";
  return side;
}

CollectiveSide trace_side(const ProfilerTrace& trace, const std::string& file) {
  CollectiveSide side;
  side.file = file;
  side.world_size = trace.world_size;
  const std::string backend = trace.ranks.empty() ? "" : trace.ranks.front().backend;
  side.description = fmt::format("PyTorch profiler trace{}, {} of {} ranks",
                                 backend.empty() ? "" : " (" + backend + ")", trace.ranks.size(), trace.world_size);
  Interner<std::vector<int>> groups(side.groups);
  Interner<std::string> streams(side.streams), labels(side.labels), keys(side.comm_keys);
  // One stream per kind of CPU thread ("pt_gloo_runloop (thread 4242)" -> "pt_gloo_runloop"):
  // thread ids differ between ranks and runs, and Gloo spreads its work over several workers.
  const auto stream_name = [](const std::string& name) {
    const std::size_t at = name.rfind(" (thread ");
    return at == std::string::npos || !name.ends_with(")") ? name : name.substr(0, at);
  };
  std::map<std::vector<int>, std::string> names;
  std::map<int, std::pair<double, int>> steps;  // iteration -> (total, ranks)
  for (const RankTrace& rank : trace.ranks) {
    std::vector<SideCollective>& out = side.by_rank.emplace_back();
    side.ranks.push_back(rank.rank);
    for (std::size_t index = 0; index < rank.collectives.size(); ++index) {
      const TraceCollective& c = rank.collectives[index];
      std::vector<int> members = c.group;
      std::sort(members.begin(), members.end());
      const std::int32_t group = members.empty() ? -1 : groups(members);
      if (!members.empty()) names.emplace(members, c.group_name);
      // "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)": the name, not the signature
      const std::int32_t label = labels(c.name.substr(0, c.name.find('(')));
      if (side.unmodelled_kinds.size() < side.labels.size()) side.unmodelled_kinds.resize(side.labels.size());
      if (!c.kind) side.unmodelled_kinds[label] = c.collective;
      const std::int32_t key = keys(c.comm_key.empty() ? c.collective : c.comm_key);
      out.push_back({group, c.step >= 0 ? c.step + 1 : -1, streams(stream_name(rank.streams[c.stream])), label,
                     static_cast<std::int32_t>(index), key,
                     static_cast<std::int8_t>(c.kind ? static_cast<int>(*c.kind) : -1), c.bytes, c.start, c.end});
    }
    for (const TraceStep& s : rank.steps) {
      auto& [total, count] = steps[s.number + 1];
      total += s.end - s.start;
      ++count;
    }
  }
  for (const std::vector<int>& members : side.groups) side.group_names.push_back(names[members]);
  for (const auto& [iteration, sum] : steps) side.step_times[iteration] = sum.first / sum.second;
  side.step_source = "ProfilerStep#N spans, mean over ranks";
  return side;
}

OpComparison match_collectives(const CollectiveSide& predicted, const CollectiveSide& measured) {
  OpComparison out;
  Matcher(predicted, measured, out).run();
  std::stable_sort(out.matched.begin(), out.matched.end(), [](const MatchedCollective& a, const MatchedCollective& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.predicted < b.predicted;
  });
  summarise(out, predicted, measured);
  return out;
}

std::vector<CountDifference> count_differences(const CollectiveSide& p, const CollectiveSide& m,
                                               const OpComparison& comparison) {
  int rank = -1;
  for (const int r : m.ranks)
    if (std::binary_search(p.ranks.begin(), p.ranks.end(), r)) {
      rank = r;
      break;
    }
  if (rank < 0) return {};
  std::set<int> predicted_iterations, measured_iterations;
  for (const auto& [pi, mi] : comparison.iterations) predicted_iterations.insert(pi), measured_iterations.insert(mi);
  // (key, members) -> counts; names for the group column
  std::map<std::pair<std::string, std::vector<int>>, std::pair<int, int>> counts;
  std::map<std::vector<int>, std::string> names;
  const auto count = [&](const CollectiveSide& side, const std::set<int>& iterations, bool predicted) {
    const auto slot = std::lower_bound(side.ranks.begin(), side.ranks.end(), rank) - side.ranks.begin();
    for (const SideCollective& c : side.by_rank[slot]) {
      if (!iterations.contains(c.iteration)) continue;
      const std::vector<int> members = c.group >= 0 ? side.groups[c.group] : std::vector<int>{};
      if (c.group >= 0 && !side.group_names[c.group].empty()) names.emplace(members, side.group_names[c.group]);
      auto& [a, b] = counts[{side.comm_keys[c.comm_key], members}];
      ++(predicted ? a : b);
    }
  };
  count(p, predicted_iterations, true);
  count(m, measured_iterations, false);
  std::vector<CountDifference> out;
  for (const auto& [key, n] : counts) {
    const auto& [comm_key, members] = key;
    const auto name = names.find(members);
    CountDifference d{
        comm_key,
        members.empty() ? std::string("(group unknown)")
                        : fmt::format("{}[{}]", name == names.end() ? "" : name->second + " ", describe_ranks(members)),
        n.first, n.second, ""};
    d.change = d.predicted == 0           ? "added"
               : d.measured == 0          ? "removed"
               : d.measured > d.predicted ? "more"
               : d.measured < d.predicted ? "fewer"
                                          : "unchanged";
    out.push_back(std::move(d));
  }
  return out;
}

std::string op_comparison_text(const OpComparison& c, const CollectiveSide& p, const CollectiveSide& m, int top) {
  std::ostringstream out;
  out << fmt::format("predicted: {} ({})\n", p.file, p.description);
  out << fmt::format("measured:  {} ({})\n", m.file, m.description);
  out << fmt::format("iterations paired {}\n", c.alignment);
  std::size_t unmatched_predicted = 0;
  for (const UnmatchedCollective& u : c.unmatched) unmatched_predicted += u.predicted_side;
  out << fmt::format("matched {} collectives: {} of {} predicted, {} of {} measured ({} unmatched)\n", c.matched.size(),
                     c.matched.size(), c.predicted_compared, c.matched.size(), c.measured_compared, c.unmatched.size());
  out << fmt::format("duration error (predicted - measured) / measured: mean |error| {}, geomean |error| {}\n",
                     format_error_magnitude(c.overall.mean_abs_error),
                     format_error_magnitude(c.overall.geomean_abs_error));
  if (!c.steps.empty()) {
    out << "\nsteps (" << p.step_source << " | " << m.step_source << "):\n";
    out << fmt::format("  {:<10}  {:>12}  {:>12}  {:>8}\n", "iteration", "predicted", "measured", "error");
    for (const ComparisonRow& row : c.steps)
      out << fmt::format("  {:<10}  {:>12}  {:>12}  {:>8}{}\n", row.label, format_seconds(row.predicted),
                         format_seconds(row.measured), format_error(row.error()),
                         row.detail.empty() ? "" : "  " + row.detail);
  }
  std::vector<const MatchedCollective*> largest;
  for (const MatchedCollective& pair : c.matched) largest.push_back(&pair);
  std::stable_sort(largest.begin(), largest.end(), [](const MatchedCollective* a, const MatchedCollective* b) {
    return std::fabs(a->error().value_or(0)) > std::fabs(b->error().value_or(0));
  });
  if (static_cast<int>(largest.size()) > top) largest.resize(top);
  out << fmt::format("\nmatched collectives, largest |error| first ({} of {}):\n", largest.size(), c.matched.size());
  out << fmt::format("  {:>5}  {:>4}  {:<28}  {:<15}  {:>12}  {:>12}  {:>12}  {:>8}\n", "rank", "iter", "op", "kind",
                     "bytes", "predicted", "measured", "error");
  for (const MatchedCollective* pair : largest) {
    const SideCollective& pc = collective_at(p, pair->rank, pair->predicted);
    out << fmt::format("  {:>5}  {:>4}  {:<28}  {:<15}  {:>12}  {:>12}  {:>12}  {:>8}\n", pair->rank,
                       pair->predicted_iteration, p.labels[pc.label].substr(0, 28), kind_text(p, pc), pc.bytes,
                       format_seconds(pair->predicted_duration), format_seconds(pair->measured_duration),
                       format_error(pair->error()));
  }
  const std::vector<CountDifference> counts = count_differences(p, m, c);
  if (!counts.empty()) {
    out << "\nCommDebugMode counts over the compared iterations (lowest common rank):\n";
    out << fmt::format("  {:<40}  {:<24}  {:>9}  {:>9}  {}\n", "key", "group", "predicted", "measured", "");
    for (const CountDifference& d : counts)
      out << fmt::format("  {:<40}  {:<24}  {:>9}  {:>9}  {}\n", d.comm_key, d.group, d.predicted, d.measured,
                         d.change);
  }
  summary_table(out, "by kind and size", c.by_kind_size);
  summary_table(out, "by stream (predicted | measured)", c.by_stream);
  if (!c.unmatched.empty()) {
    std::map<std::string, int> reasons;
    for (const UnmatchedCollective& u : c.unmatched) ++reasons[u.reason];
    out << fmt::format("\nunmatched ({} collectives; {} predicted, {} measured), first {}:\n", c.unmatched.size(),
                       unmatched_predicted, c.unmatched.size() - unmatched_predicted,
                       std::min<std::size_t>(top, c.unmatched.size()));
    for (std::size_t i = 0; i < c.unmatched.size() && static_cast<int>(i) < top; ++i) {
      const UnmatchedCollective& u = c.unmatched[i];
      const CollectiveSide& side = u.predicted_side ? p : m;
      const SideCollective& sc = collective_at(side, u.rank, u.index);
      out << fmt::format("  {} rank {} {} ({}, {}): {}\n", u.predicted_side ? "predicted" : "measured ", u.rank,
                         side.labels[sc.label], kind_text(side, sc), bytes_text(sc.bytes), u.reason);
    }
  }
  for (const std::string& note : c.notes) out << "note: " << note << "\n";
  return out.str();
}

json op_comparison_json(const OpComparison& c, const CollectiveSide& p, const CollectiveSide& m) {
  const auto side = [](const CollectiveSide& s) {
    return json{{"file", s.file}, {"description", s.description}, {"world_size", s.world_size}, {"ranks", s.ranks}};
  };
  json iterations = json::array(), matched = json::array(), unmatched = json::array(), steps = json::array();
  for (const auto& [pi, mi] : c.iterations) iterations.push_back({{"predicted", pi}, {"measured", mi}});
  for (const MatchedCollective& pair : c.matched) {
    const SideCollective &pc = collective_at(p, pair.rank, pair.predicted),
                         &mc = collective_at(m, pair.rank, pair.measured);
    matched.push_back({{"rank", pair.rank},
                       {"iteration", pair.predicted_iteration},
                       {"measured_iteration", pair.measured_iteration},
                       {"sequence", pair.sequence},
                       {"kind", kind_text(p, pc)},
                       {"group", pc.group >= 0 ? json(p.groups[pc.group]) : json(nullptr)},
                       {"bytes", pc.bytes},
                       {"predicted_op", p.labels[pc.label]},
                       {"measured_op", m.labels[mc.label]},
                       {"predicted_s", pair.predicted_duration},
                       {"measured_s", pair.measured_duration},
                       {"error", error_json(pair.error())}});
  }
  for (const UnmatchedCollective& u : c.unmatched) {
    const CollectiveSide& s = u.predicted_side ? p : m;
    const SideCollective& sc = collective_at(s, u.rank, u.index);
    unmatched.push_back({{"side", u.predicted_side ? "predicted" : "measured"},
                         {"rank", u.rank},
                         {"iteration", sc.iteration},
                         {"op", s.labels[sc.label]},
                         {"kind", kind_text(s, sc)},
                         {"bytes", sc.bytes},
                         {"reason", u.reason}});
  }
  for (const ComparisonRow& row : c.steps)
    steps.push_back({{"iteration", std::stoi(row.label)},
                     {"predicted_s", row.predicted},
                     {"measured_s", row.measured},
                     {"error", error_json(row.error())}});
  json by_kind_size = json::array(), by_stream = json::array(), counts = json::array();
  for (const CountDifference& d : count_differences(p, m, c))
    counts.push_back({{"comm_key", d.comm_key},
                      {"group", d.group},
                      {"predicted", d.predicted},
                      {"measured", d.measured},
                      {"change", d.change}});
  for (const ErrorSummary& s : c.by_kind_size) by_kind_size.push_back(summary_json(s));
  for (const ErrorSummary& s : c.by_stream) by_stream.push_back(summary_json(s));
  return {{"format", "stratsim.op_comparison"},
          {"version", 1},
          {"predicted", side(p)},
          {"measured", side(m)},
          {"alignment", c.alignment},
          {"iterations", iterations},
          {"predicted_compared", c.predicted_compared},
          {"measured_compared", c.measured_compared},
          {"overall", summary_json(c.overall)},
          {"steps", steps},
          {"by_kind_size", by_kind_size},
          {"by_stream", by_stream},
          {"counts", counts},
          {"matched", matched},
          {"unmatched", unmatched},
          {"notes", c.notes}};
}

}  // namespace stratsim::core
