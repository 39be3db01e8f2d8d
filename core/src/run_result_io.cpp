// run_result_to_json / run_result_from_json: the RunResult codec. The reader checks what the
// analysis relies on (one timing per op of a recorded rank, start <= end, ranks inside the world)
// so a file that passes it cannot make analyse() or the viewer index out of range.
#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "run_views.hpp"
#include "stratsim/core/errors.hpp"
#include "stratsim/core/json_reader.hpp"
#include "stratsim/core/run_result.hpp"

namespace stratsim::core {
namespace {

using json = nlohmann::json;

json timings_json(const std::vector<OpTiming>& timings) {
  json issue = json::array(), start = json::array(), end = json::array();
  for (const OpTiming& t : timings) {
    issue.push_back(t.issue);
    start.push_back(t.start);
    end.push_back(t.end);
  }
  return {{"issue_s", std::move(issue)}, {"start_s", std::move(start)}, {"end_s", std::move(end)}};
}

json collective_json(const CollectiveRun& run) {
  return {{"op", run.op},
          {"instance", run.instance},
          {"algorithm", run.algorithm},
          {"bytes", run.bytes},
          {"group_size", run.group_size},
          {"start_s", run.start},
          {"end_s", run.end},
          {"ranks", run.ranks}};
}

// A time in seconds, read without going through JsonReader per element: timing arrays hold one
// number per op per recorded rank, the bulk of a large file.
double time_at(const JsonReader& array, std::size_t i) {
  const json& value = array.value()[i];
  if (!value.is_number()) array.at(i).fail(fmt::format("expected a number, got {}", value.type_name()));
  const double number = value.get<double>();
  if (!(std::fabs(number) <= detail::kMaxTime)) array.at(i).fail(detail::kTimeExpected);
  return number;
}

double time_of(const JsonReader& node) { return detail::read_time(node); }

std::vector<double> numbers(const JsonReader& array) {
  array.expect_array();
  std::vector<double> out(array.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = time_at(array, i);
  return out;
}

std::vector<int> rank_list(const JsonReader& array, int world_size) {
  array.expect_array();
  std::vector<int> out;
  out.reserve(array.size());
  for (std::size_t i = 0; i < array.size(); ++i) {
    const std::int64_t rank = array.at(i).as_int();
    if (rank < 0 || rank >= world_size)
      array.at(i).fail(fmt::format("rank {} is outside the world (0..{})", rank, world_size - 1));
    out.push_back(static_cast<int>(rank));
  }
  return out;
}

std::vector<OpTiming> read_timings(const JsonReader& node) {
  node.allow_only({"issue_s", "start_s", "end_s"});
  const JsonReader issue = node.at("issue_s"), start = node.at("start_s"), end = node.at("end_s");
  issue.expect_array();
  start.expect_array();
  end.expect_array();
  if (start.size() != issue.size() || end.size() != issue.size())
    node.fail(fmt::format("issue_s, start_s and end_s must have one entry per op (got {}, {} and {})", issue.size(),
                          start.size(), end.size()));
  std::vector<OpTiming> timings(issue.size());
  for (std::size_t i = 0; i < timings.size(); ++i) {
    timings[i] = {time_at(issue, i), time_at(start, i), time_at(end, i)};
    if (timings[i].end < timings[i].start)
      end.at(i).fail(fmt::format("op {} ends before it starts ({} < {})", i, timings[i].end, timings[i].start));
  }
  return timings;
}

CollectiveRun read_collective(const JsonReader& node, int world_size) {
  node.allow_only({"op", "instance", "algorithm", "bytes", "group_size", "start_s", "end_s", "ranks"});
  CollectiveRun run;
  run.op = static_cast<int>(node.at("op").as_int());
  run.instance = static_cast<int>(node.at("instance").as_int());
  run.algorithm = node.get_string("algorithm", "");
  run.bytes = node.at("bytes").as_number();
  run.group_size = static_cast<int>(node.at("group_size").as_int());
  if (run.group_size < 1) node.at("group_size").fail("expected at least 1");
  run.start = time_of(node.at("start_s"));
  run.end = time_of(node.at("end_s"));
  if (run.end < run.start) node.at("end_s").fail("the collective ends before it starts");
  run.ranks = rank_list(node.at("ranks"), world_size);
  return run;
}

LinkLoad read_link(const JsonReader& node) {
  node.allow_only({"name", "bandwidth_GBps", "bytes", "utilisation"});
  return {node.at("name").as_string(), node.at("bandwidth_GBps").as_number() * 1e9, node.at("bytes").as_number(),
          node.at("utilisation").as_number()};
}

}  // namespace

json run_result_to_json(const RunResult& result) {
  json run;
  run["source"] = result.source;
  run["mode"] = result.mode;
  run["platform"] = result.platform;
  run["world_size"] = result.world_size;
  run["makespan_s"] = result.makespan;
  json recorded = json::array(), timings = json::array();
  for (std::size_t s = 0; s < result.timings.size(); ++s) {
    recorded.push_back(detail::ranks_of(result, s));
    timings.push_back(timings_json(result.timings[s]));
  }
  run["recorded"] = std::move(recorded);
  run["timings"] = std::move(timings);
  json collectives = json::array();
  for (const CollectiveRun& c : result.collectives) collectives.push_back(collective_json(c));
  run["collectives"] = std::move(collectives);
  run["links"] = detail::links_json(result.links);
  run["iteration_end_s"] = result.iteration_end;
  run["mode_notes"] = result.mode_notes;
  run["notes"] = result.notes;
  run["extra"] = result.extra;
  return run;
}

RunResult run_result_from_json(const json& document, const std::string& origin) {
  return run_result_from_json(JsonReader(document, origin));
}

RunResult run_result_from_json(const JsonReader& doc) {
  doc.allow_only({"source", "mode", "platform", "world_size", "makespan_s", "recorded", "timings", "collectives",
                  "links", "iteration_end_s", "mode_notes", "notes", "extra"});
  RunResult result;
  result.source = doc.at("source").as_string();
  result.mode = doc.at("mode").as_string();
  if (result.mode != "representative" && result.mode != "full" && result.mode != "measured")
    doc.at("mode").fail(fmt::format("expected representative, full or measured, got \"{}\"", result.mode));
  result.platform = doc.get_string("platform", "");
  const std::int64_t world_size = doc.at("world_size").as_int();
  if (world_size < 1 || world_size > (1 << 24)) doc.at("world_size").fail("expected 1 to 16777216 ranks");
  result.world_size = static_cast<int>(world_size);
  result.makespan = time_of(doc.at("makespan_s"));
  const JsonReader recorded = doc.at("recorded"), timings = doc.at("timings");
  recorded.expect_array();
  timings.expect_array();
  if (recorded.size() != timings.size())
    doc.fail(fmt::format("recorded and timings must have one entry per recorded rank (got {} and {})", recorded.size(),
                         timings.size()));
  for (std::size_t s = 0; s < recorded.size(); ++s) {
    result.recorded.push_back(rank_list(recorded.at(s), result.world_size));
    if (result.recorded.back().empty()) recorded.at(s).fail("a recorded rank stands for at least one rank");
    result.timings.push_back(read_timings(timings.at(s)));
  }
  const JsonReader collectives = doc.at("collectives");
  collectives.expect_array();
  for (std::size_t i = 0; i < collectives.size(); ++i)
    result.collectives.push_back(read_collective(collectives.at(i), result.world_size));
  const JsonReader links = doc.at("links");
  links.expect_array();
  for (std::size_t i = 0; i < links.size(); ++i) result.links.push_back(read_link(links.at(i)));
  result.iteration_end = numbers(doc.at("iteration_end_s"));
  if (doc.has("mode_notes")) result.mode_notes = doc.get_string_list("mode_notes");
  if (doc.has("notes")) result.notes = doc.get_string_list("notes");
  if (doc.has("extra")) {
    doc.at("extra").expect_object();
    result.extra = doc.at("extra").value();
  }
  return result;
}

}  // namespace stratsim::core
