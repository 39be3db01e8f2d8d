// The report of a run, simulated (`stratsim simulate`) or measured (`stratsim run`): a terminal
// text form and a deterministic JSON form ("stratsim.simulation" v1 for both, documented in
// sim/README.md). Both only format an Analysis and what the producer noted; the JSON leaves out
// host wall time so that two runs of the same input give byte-identical output.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "run_views.hpp"
#include "stratsim/core/run_analysis.hpp"

namespace stratsim::core {
namespace {

using json = nlohmann::json;

constexpr std::size_t kRanksShown = 8;  // the text report lists this many recorded ranks

// How the report calls a recorded rank: the simulator's wording for simulated runs.
std::string_view rank_adjective(const RunResult& result) {
  return detail::is_simulated(result) ? "simulated" : "recorded";
}

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += separator;
    out += items[i];
  }
  return out;
}

// 1234567 -> "1.235 M": throughput figures span many orders of magnitude.
std::string si(double value) {
  const double magnitude = std::fabs(value);
  if (magnitude >= 1e12) return fmt::format("{:.3f} T", value / 1e12);
  if (magnitude >= 1e9) return fmt::format("{:.3f} G", value / 1e9);
  if (magnitude >= 1e6) return fmt::format("{:.3f} M", value / 1e6);
  if (magnitude >= 1e3) return fmt::format("{:.3f} k", value / 1e3);
  return fmt::format("{:.3f} ", value);
}

// "stratsim simulate: ..." or "stratsim run (gloo): ...".
std::string title_line(const Program& program, const RunResult& result, const Analysis& analysis) {
  const std::string title =
      detail::is_simulated(result) ? "stratsim simulate" : fmt::format("stratsim run ({})", result.source);
  return fmt::format("{}: {} ops, {} iterations, world size {}\n", title, program.ops.size(),
                     analysis.iterations.size(), result.world_size);
}

// The rank mode, then the producer's mode notes as "; "-separated clauses.
std::string mode_line(const RunResult& result) {
  std::string line = result.mode == "representative"
                         ? fmt::format("mode: representative (1 {} rank stands for all {} ranks)",
                                       rank_adjective(result), result.world_size)
                         : fmt::format("mode: {} ({} {} ranks of {})", result.mode, result.recorded.size(),
                                       rank_adjective(result), result.world_size);
  for (const std::string& note : result.mode_notes) line += "; " + note;
  return line + "\n";
}

// The makespan, then in parentheses the producer's notes and, for a measured run, the host time it
// took. A simulation's host time is not part of its report: the same inputs give byte-identical
// reports (`simulate` says how long it took on stderr).
std::string makespan_line(const RunResult& result, const Analysis& analysis) {
  std::vector<std::string> clauses = result.notes;
  if (!detail::is_simulated(result)) clauses.push_back(fmt::format("ran in {}", format_seconds(result.wall_seconds)));
  if (clauses.empty()) return fmt::format("makespan: {}\n", format_seconds(analysis.makespan));
  return fmt::format("makespan: {} ({})\n", format_seconds(analysis.makespan), join(clauses, ", "));
}

void iteration_section(std::string& out, const Analysis& analysis) {
  out += "\niterations:\n";
  out += fmt::format("  {:>5}  {:>12}  {:>12}  {:>12}  {:>14}  {:>12}  {:>12}  {:>8}\n", "iter", "step time",
                     "samples/s", "tokens/s", "TFLOP/s/device", "comm", "exposed", "overlap");
  for (const IterationStats& it : analysis.iterations)
    out += fmt::format("  {:>5}  {:>12}  {:>12}  {:>12}  {:>14.3f}  {:>12}  {:>12}  {:>7.1f}%\n", it.iteration,
                       format_seconds(it.step_time), si(it.samples_per_second),
                       it.tokens_per_second > 0 ? si(it.tokens_per_second) : "-", it.model_tflops_per_device,
                       format_seconds(it.communication), format_seconds(it.exposed_communication), 100 * it.overlap);
  // The first iteration carries warm-up (first gathers, empty pipelines); the rest is steady state.
  if (analysis.iterations.size() > 2) {
    double total = 0;
    for (std::size_t i = 1; i < analysis.iterations.size(); ++i) total += analysis.iterations[i].step_time;
    out += fmt::format("  mean step time of iterations 2-{}: {}\n", analysis.iterations.size(),
                       format_seconds(total / static_cast<double>(analysis.iterations.size() - 1)));
  }
}

void rank_section(std::string& out, const RunResult& result, const Analysis& analysis) {
  out += fmt::format("\nper {} rank:\n", rank_adjective(result));
  out += fmt::format("  {:<16}  {:>12}  {:>12}  {:>12}  {:>8}  {:>12}  {:>12}\n", "ranks", "compute", "comm", "exposed",
                     "overlap", "idle", "wait");
  for (std::size_t i = 0; i < analysis.ranks.size(); ++i) {
    if (i == kRanksShown) {
      out += fmt::format("  ... ({} more)\n", analysis.ranks.size() - kRanksShown);
      break;
    }
    const RankStats& r = analysis.ranks[i];
    out +=
        fmt::format("  {:<16}  {:>12}  {:>12}  {:>12}  {:>7.1f}%  {:>12}  {:>12}\n", describe_ranks(r.ranks, 2),
                    format_seconds(r.compute), format_seconds(r.communication), format_seconds(r.exposed_communication),
                    r.overlap * 100, format_seconds(r.idle), format_seconds(r.wait_at_collective));
    std::string streams;
    for (const StreamStats& s : r.streams)
      streams += fmt::format("{}{} {}", streams.empty() ? "" : ", ", s.stream, format_seconds(s.busy));
    out += "    stream busy: " + streams + "\n";
  }
}

// One row per (kind, group, algorithm): the run's collectives, summed over ops and instances.
struct CollectiveRow {
  std::set<int> ops;
  int runs = 0;
  double bytes = 0, time = 0, busbw_sum = 0;
  int timed = 0;  // runs with a non-zero duration, over which busbw is averaged
};

void collective_section(std::string& out, const Analysis& analysis) {
  using Key = std::tuple<std::string, std::string, std::string>;
  std::map<Key, CollectiveRow> rows;
  for (const CollectiveStats& c : analysis.collectives) {
    CollectiveRow& row = rows[{std::string(collective_kind_name(c.kind)), c.group, c.algorithm}];
    row.ops.insert(c.op);
    ++row.runs;
    row.bytes += c.bytes;
    row.time += c.duration;
    if (c.duration > 0) {
      row.busbw_sum += c.busbw;
      ++row.timed;
    }
  }
  std::vector<std::pair<Key, CollectiveRow>> sorted(rows.begin(), rows.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second.time > b.second.time; });
  // The algorithm column fits the longest name ("gloo halving-doubling"), 12 at least.
  std::size_t width = 12;
  for (const auto& [key, row] : sorted) width = std::max(width, std::get<2>(key).size());
  out += "\ncollectives (instances summed):\n";
  out += fmt::format("  {:<15}  {:<10}  {:<{}}  {:>6}  {:>8}  {:>12}  {:>12}  {:>14}\n", "kind", "group", "algorithm",
                     width, "ops", "runs", "total time", "mean time", "mean busbw");
  for (const auto& [key, row] : sorted) {
    const auto& [kind, group, algorithm] = key;
    const double mean_busbw = row.timed ? row.busbw_sum / row.timed : 0.0;
    out += fmt::format("  {:<15}  {:<10}  {:<{}}  {:>6}  {:>8}  {:>12}  {:>12}  {:>9.2f} GB/s\n", kind, group,
                       algorithm, width, row.ops.size(), row.runs, format_seconds(row.time),
                       format_seconds(row.time / row.runs), mean_busbw / 1e9);
  }
  if (rows.empty()) out += "  (none)\n";
}

// Only simulations model links; a measured run without link figures has no section.
void link_section(std::string& out, const RunResult& result, const Analysis& analysis) {
  if (analysis.busiest_links.empty() && !detail::is_simulated(result)) return;
  out += "\nbusiest links:\n";
  for (const LinkLoad& link : analysis.busiest_links)
    out += fmt::format("  {:<32}  {:>9.2f} GB/s  {:>12}B  {:>6.1f}%\n", link.name, link.bandwidth / 1e9, si(link.bytes),
                       link.utilisation * 100);
  if (analysis.busiest_links.empty()) out += "  (none)\n";
}

json iteration_json(const IterationStats& it) {
  return {{"iteration", it.iteration},
          {"start_s", it.start},
          {"end_s", it.end},
          {"step_time_s", it.step_time},
          {"samples_per_s", it.samples_per_second},
          {"tokens_per_s", it.tokens_per_second},
          {"model_tflops_per_device", it.model_tflops_per_device},
          {"communication_s", it.communication},
          {"exposed_communication_s", it.exposed_communication},
          {"overlap", it.overlap}};
}

json rank_json(const RankStats& r) {
  json streams = json::object();
  for (const StreamStats& s : r.streams) streams[s.stream] = s.busy;
  return {{"ranks", r.ranks},
          {"compute_s", r.compute},
          {"communication_s", r.communication},
          {"exposed_communication_s", r.exposed_communication},
          {"overlap", r.overlap},
          {"idle_s", r.idle},
          {"wait_at_collective_s", r.wait_at_collective},
          {"streams", streams}};
}

json collective_json(const CollectiveStats& c) {
  return {{"op", c.op},
          {"name", c.name},
          {"kind", collective_kind_name(c.kind)},
          {"group", c.group},
          {"instance", c.instance},
          {"algorithm", c.algorithm},
          {"group_size", c.group_size},
          {"bytes", c.bytes},
          {"start_s", c.start},
          {"end_s", c.end},
          {"duration_s", c.duration},
          {"algbw_GBps", c.algbw / 1e9},
          {"busbw_GBps", c.busbw / 1e9}};
}

}  // namespace

std::string text_report(const Program& program, const RunResult& result, const Analysis& analysis) {
  std::string out = title_line(program, result, analysis);
  out += "platform: " + result.platform + "\n";
  out += mode_line(result);
  out += makespan_line(result, analysis);
  iteration_section(out, analysis);
  rank_section(out, result, analysis);
  collective_section(out, analysis);
  link_section(out, result, analysis);
  return out;
}

json json_report(const Program& /*program*/, const RunResult& result, const Analysis& analysis) {
  // The producer's keys first, so that they never replace the report's own.
  json doc = result.extra.is_object() ? result.extra : json::object();
  // One format for every source (stratsim compare reads both sides alike); "source" is written for
  // measured runs only, so that simulation reports keep their bytes.
  doc["format"] = "stratsim.simulation";
  if (!detail::is_simulated(result)) doc["source"] = result.source;
  doc["version"] = 1;
  doc["platform"] = result.platform;
  doc["mode"] = result.mode;
  doc["world_size"] = result.world_size;
  doc["makespan_s"] = analysis.makespan;
  json iterations = json::array(), ranks = json::array(), collectives = json::array();
  for (const IterationStats& it : analysis.iterations) iterations.push_back(iteration_json(it));
  for (const RankStats& r : analysis.ranks) ranks.push_back(rank_json(r));
  for (const CollectiveStats& c : analysis.collectives) collectives.push_back(collective_json(c));
  doc["iterations"] = std::move(iterations);
  doc["ranks"] = std::move(ranks);
  doc["collectives"] = std::move(collectives);
  // Every link that carried bytes (the result's order, by name); the text report shows the busiest.
  doc["links"] = detail::links_json(result.links);
  return doc;
}

}  // namespace stratsim::core
