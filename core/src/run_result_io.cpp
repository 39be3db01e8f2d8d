// run_result_to_json / run_result_from_json: the RunResult codec. The reader checks what the
// analysis relies on (one timing per op of a recorded rank, start <= end, ranks inside the world)
// so a file that passes it cannot make analyse() or the viewer index out of range.
#include <fmt/format.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "run_views.hpp"
#include "stratsim/core/errors.hpp"
#include "stratsim/core/json_reader.hpp"
#include "stratsim/core/program.hpp"
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

// The members of every group instance of the program's groups, resolved from its mesh once per
// group: a collective instance whose ranks are exactly these is written without its rank list
// (at 16,384 ranks that list is most of the file), and read back from the program.
class MeshGroups {
 public:
  explicit MeshGroups(const Program* program) : program_(program) {}

  // The members of instance `instance` of op `op`'s group; nullptr when the program cannot say.
  const std::vector<int>* members(int op, int instance) {
    if (!program_ || op < 0 || static_cast<std::size_t>(op) >= program_->ops.size()) return nullptr;
    const int group = program_->ops[op].group;
    if (group < 0 || static_cast<std::size_t>(group) >= program_->groups.size()) return nullptr;
    if (program_->groups[group].mesh_dims.empty() || program_->mesh.world_size() != program_->world_size)
      return nullptr;
    auto [it, added] = cache_.try_emplace(group);
    if (added) it->second = program_->all_groups(group);
    if (instance < 0 || static_cast<std::size_t>(instance) >= it->second.size()) return nullptr;
    return &it->second[instance];
  }

 private:
  const Program* program_;
  std::map<int, std::vector<std::vector<int>>> cache_;
};

// Column by column: a 16,384-rank run has hundreds of thousands of instances, and one object per
// instance would repeat every key name each time.
json collectives_json(const std::vector<CollectiveRun>& runs, const Program* program) {
  json op = json::array(), instance = json::array(), algorithm = json::array(), bytes = json::array(),
       group_size = json::array(), start = json::array(), end = json::array(), ranks = json::array();
  MeshGroups groups(program);
  for (const CollectiveRun& run : runs) {
    op.push_back(run.op);
    instance.push_back(run.instance);
    algorithm.push_back(run.algorithm);
    bytes.push_back(run.bytes);
    group_size.push_back(run.group_size);
    start.push_back(run.start);
    end.push_back(run.end);
    const std::vector<int>* members = groups.members(run.op, run.instance);
    ranks.push_back(members && *members == run.ranks ? json(nullptr) : json(run.ranks));
  }
  return {{"op", std::move(op)},
          {"instance", std::move(instance)},
          {"algorithm", std::move(algorithm)},
          {"bytes", std::move(bytes)},
          {"group_size", std::move(group_size)},
          {"start_s", std::move(start)},
          {"end_s", std::move(end)},
          {"ranks", std::move(ranks)}};
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

std::vector<CollectiveRun> read_collectives(const JsonReader& node, int world_size, const Program* program) {
  node.allow_only({"op", "instance", "algorithm", "bytes", "group_size", "start_s", "end_s", "ranks"});
  const JsonReader op = node.at("op"), instance = node.at("instance"), algorithm = node.at("algorithm"),
                   bytes = node.at("bytes"), group_size = node.at("group_size"), start = node.at("start_s"),
                   end = node.at("end_s"), ranks = node.at("ranks");
  const std::size_t count = op.size();
  for (const JsonReader* column : {&op, &instance, &algorithm, &bytes, &group_size, &start, &end, &ranks}) {
    column->expect_array();
    if (column->size() != count)
      column->fail(fmt::format("expected one entry per collective instance ({}), got {}", count, column->size()));
  }
  MeshGroups groups(program);
  std::vector<CollectiveRun> runs(count);
  for (std::size_t i = 0; i < count; ++i) {
    CollectiveRun& run = runs[i];
    run.op = static_cast<int>(op.at(i).as_int());
    run.instance = static_cast<int>(instance.at(i).as_int());
    run.algorithm = algorithm.at(i).as_string();
    run.bytes = bytes.at(i).as_number();
    const std::int64_t size = group_size.at(i).as_int();
    if (size < 1 || size > world_size) group_size.at(i).fail(fmt::format("expected 1 to {} ranks", world_size));
    run.group_size = static_cast<int>(size);
    run.start = time_at(start, i);
    run.end = time_at(end, i);
    if (run.end < run.start) end.at(i).fail("the collective ends before it starts");
    if (!ranks.at(i).is_null()) {
      run.ranks = rank_list(ranks.at(i), world_size);
    } else if (const std::vector<int>* members = groups.members(run.op, run.instance)) {
      run.ranks = *members;
    } else {
      ranks.at(i).fail("null (the mesh group's ranks) needs a program whose group for this op has this instance");
    }
  }
  return runs;
}

LinkLoad read_link(const JsonReader& node) {
  node.allow_only({"name", "bandwidth_GBps", "bytes", "utilisation"});
  return {node.at("name").as_string(), node.at("bandwidth_GBps").as_number() * 1e9, node.at("bytes").as_number(),
          node.at("utilisation").as_number()};
}

}  // namespace

json run_result_to_json(const RunResult& result, const Program* program) {
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
  run["collectives"] = collectives_json(result.collectives, program);
  run["links"] = detail::links_json(result.links);
  run["iteration_end_s"] = result.iteration_end;
  run["mode_notes"] = result.mode_notes;
  run["notes"] = result.notes;
  run["extra"] = result.extra;
  return run;
}

RunResult run_result_from_json(const json& document, const std::string& origin, const Program* program) {
  return run_result_from_json(JsonReader(document, origin), program);
}

RunResult run_result_from_json(const JsonReader& doc, const Program* program) {
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
  result.collectives = read_collectives(doc.at("collectives"), result.world_size, program);
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
