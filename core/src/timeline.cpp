// stratsim.timeline: version 2 written, versions 1 and 2 read. A v1 file was written for viewing
// only: per recorded rank a list of ops with times, collectives with their group's name and size.
// Reading it rebuilds a program that holds what v1 carried (names, modules, streams, phases,
// iterations, dependencies, kinds, groups by name, bytes) and leaves the rest at its defaults (no
// op class or FLOPs, so model TFLOPs read 0; groups have no mesh dims).
#include "stratsim/core/timeline.hpp"

#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>

#include "run_views.hpp"
#include "stratsim/core/errors.hpp"
#include "stratsim/core/json_reader.hpp"

namespace stratsim::core {
namespace {

using json = nlohmann::json;

// v2 ties the run to the program: one timing per op on every recorded rank, collectives that name
// collective ops, iterations the program has.
void check_run_matches_program(const JsonReader& doc, const Program& program, const RunResult& result) {
  const JsonReader run = doc.at("run");
  for (std::size_t s = 0; s < result.timings.size(); ++s)
    if (result.timings[s].size() != program.ops.size())
      run.at("timings").at(s).fail(
          fmt::format("expected one timing per program op ({}), got {}", program.ops.size(), result.timings[s].size()));
  for (std::size_t i = 0; i < result.collectives.size(); ++i) {
    const int op = result.collectives[i].op;
    if (op < 0 || static_cast<std::size_t>(op) >= program.ops.size() || program.ops[op].type != OpType::collective)
      run.at("collectives").at("op").at(i).fail(fmt::format("op {} is not a collective of the program", op));
  }
  if (result.world_size != program.world_size)
    run.at("world_size")
        .fail(fmt::format("the program is for {} ranks, the run for {}", program.world_size, result.world_size));
}

Timeline read_v2(const JsonReader& doc) {
  doc.allow_only({"format", "version", "program", "run", "workload"});
  Timeline timeline;
  timeline.version = 2;
  timeline.program = program_from_json(doc.at("program"));
  timeline.result = run_result_from_json(doc.at("run"), &timeline.program);
  check_run_matches_program(doc, timeline.program, timeline.result);
  if (doc.has("workload")) {
    const JsonReader workload = doc.at("workload");
    workload.allow_only({"samples_per_step", "tokens_per_sample"});
    timeline.workload.samples_per_step = workload.get_number("samples_per_step", 0);
    timeline.workload.tokens_per_sample = workload.get_number("tokens_per_sample", 0);
    if (!(timeline.workload.samples_per_step >= 0) || !(timeline.workload.tokens_per_sample >= 0))
      workload.fail("expected non-negative samples_per_step and tokens_per_sample");
  }
  return timeline;
}

// ---- version 1 ----

// What the v1 collectives say about each op: its group's name and size, and its bytes.
struct V1CollectiveInfo {
  std::string group;
  int group_size = 1;
  double bytes = 0;
};

ProgramOp v1_op(const JsonReader& node, int id, const Program& program) {
  ProgramOp op;
  op.id = id;
  op.name = node.at("name").as_string();
  op.module = node.get_string("module", "");
  op.stream = static_cast<int>(node.at("stream").as_int());
  if (op.stream < 0 || static_cast<std::size_t>(op.stream) >= program.streams.size())
    node.at("stream").fail("no such stream");
  op.iteration = static_cast<int>(node.at("iteration").as_int());
  op.phase = parse_phase(node.at("phase"));
  const JsonReader deps = node.at("deps");
  for (std::size_t k = 0; k < deps.size(); ++k) {
    const std::int64_t dep = deps.at(k).as_int();
    if (dep < 0 || dep >= id) deps.at(k).fail("a dependency must name an earlier op");
    op.deps.push_back(static_cast<int>(dep));
  }
  if (node.at("kind").as_string() == "compute") {
    op.type = OpType::compute;
  } else {
    op.type = OpType::collective;
    op.kind = parse_collective_kind(node.at("kind"));
  }
  return op;
}

OpTiming v1_timing(const JsonReader& node) {
  OpTiming t{detail::read_time(node.at("issue_s")), detail::read_time(node.at("start_s")),
             detail::read_time(node.at("end_s"))};
  if (t.end < t.start) node.at("end_s").fail("the op ends before it starts");
  return t;
}

std::map<int, V1CollectiveInfo> v1_collective_info(const JsonReader& collectives) {
  std::map<int, V1CollectiveInfo> info;
  for (std::size_t i = 0; i < collectives.size(); ++i) {
    const JsonReader c = collectives.at(i);
    const std::int64_t group_size = c.at("group_size").as_int();
    if (group_size < 1 || group_size > (1 << 24)) c.at("group_size").fail("expected 1 to 16777216 ranks");
    info.emplace(static_cast<int>(c.at("op").as_int()),
                 V1CollectiveInfo{c.get_string("group", ""), static_cast<int>(group_size), c.at("bytes").as_number()});
  }
  return info;
}

// Groups by name, as v1 knew them; collective ops get their group, bytes and CommDebugMode-less
// defaults.
void attach_v1_groups(Program& program, const std::map<int, V1CollectiveInfo>& info) {
  std::map<std::string, int> group_ids;
  for (ProgramOp& op : program.ops) {
    if (op.type != OpType::collective) continue;
    const auto it = info.find(op.id);
    const V1CollectiveInfo known = it == info.end() ? V1CollectiveInfo{} : it->second;
    const auto [group, added] = group_ids.emplace(known.group, static_cast<int>(program.groups.size()));
    if (added) program.groups.push_back({{}, known.group, known.group_size});
    op.group = group->second;
    op.bytes = op.input_bytes = op.output_bytes = static_cast<std::int64_t>(known.bytes);
  }
}

// The ops of the first recorded rank define the program; every rank must list the same op ids.
Timeline read_v1(const JsonReader& doc) {
  Timeline timeline;
  timeline.version = 1;
  Program& program = timeline.program;
  RunResult& result = timeline.result;
  const std::string source = doc.at("source").as_string();
  result.source = source == "simulated" ? "simulation" : source;
  result.mode = doc.at("mode").as_string();
  result.platform = doc.get_string("platform", "");
  const std::int64_t world_size = doc.at("world_size").as_int();
  if (world_size < 1 || world_size > (1 << 24)) doc.at("world_size").fail("expected 1 to 16777216 ranks");
  result.world_size = static_cast<int>(world_size);
  result.makespan = detail::read_time(doc.at("makespan_s"));
  program.world_size = result.world_size;
  program.mesh = DeviceMesh({result.world_size}, {"world"});
  program.streams = doc.get_string_list("streams");
  const JsonReader ranks = doc.at("ranks");
  if (ranks.size() == 0) ranks.fail("expected at least one recorded rank");
  const JsonReader first_ops = ranks.at(0).at("ops");
  for (std::size_t i = 0; i < first_ops.size(); ++i) {
    const JsonReader node = first_ops.at(i);
    if (node.at("op").as_int() != static_cast<std::int64_t>(i)) node.at("op").fail(fmt::format("expected op id {}", i));
    program.ops.push_back(v1_op(node, static_cast<int>(i), program));
    program.iterations = std::max(program.iterations, program.ops.back().iteration);
  }
  for (std::size_t s = 0; s < ranks.size(); ++s) {
    const JsonReader rank = ranks.at(s);
    std::vector<int> members;
    for (std::size_t k = 0; k < rank.at("ranks").size(); ++k)
      members.push_back(static_cast<int>(rank.at("ranks").at(k).as_int()));
    result.recorded.push_back(std::move(members));
    const JsonReader ops = rank.at("ops");
    if (ops.size() != program.ops.size())
      ops.fail(fmt::format("expected the {} ops of the first recorded rank, got {}", program.ops.size(), ops.size()));
    std::vector<OpTiming> timings(ops.size());
    for (std::size_t i = 0; i < ops.size(); ++i) timings[i] = v1_timing(ops.at(i));
    result.timings.push_back(std::move(timings));
  }
  const JsonReader collectives = doc.at("collectives");
  attach_v1_groups(program, v1_collective_info(collectives));
  for (std::size_t i = 0; i < collectives.size(); ++i) {
    const JsonReader c = collectives.at(i);
    CollectiveRun run;
    run.op = static_cast<int>(c.at("op").as_int());
    if (run.op < 0 || static_cast<std::size_t>(run.op) >= program.ops.size() ||
        program.ops[run.op].type != OpType::collective)
      c.at("op").fail(fmt::format("op {} is not a collective", run.op));
    run.instance = static_cast<int>(c.at("instance").as_int());
    run.algorithm = c.get_string("algorithm", "");
    run.bytes = c.at("bytes").as_number();
    run.group_size = static_cast<int>(c.at("group_size").as_int());
    run.start = detail::read_time(c.at("start_s"));
    run.end = detail::read_time(c.at("end_s"));
    for (std::size_t k = 0; k < c.at("ranks").size(); ++k)
      run.ranks.push_back(static_cast<int>(c.at("ranks").at(k).as_int()));
    result.collectives.push_back(std::move(run));
  }
  const JsonReader links = doc.at("links");
  for (std::size_t i = 0; i < links.size(); ++i) {
    const JsonReader l = links.at(i);
    result.links.push_back({l.at("name").as_string(), l.at("bandwidth_GBps").as_number() * 1e9,
                            l.at("bytes").as_number(), l.at("utilisation").as_number()});
  }
  const JsonReader ends = doc.at("iteration_end_s");
  for (std::size_t i = 0; i < ends.size(); ++i) result.iteration_end.push_back(detail::read_time(ends.at(i)));
  return timeline;
}

}  // namespace

json timeline_json(const Program& program, const RunResult& result, const Workload& workload) {
  json doc;
  doc["format"] = "stratsim.timeline";
  doc["version"] = 2;
  doc["program"] = program_to_json(program);
  doc["run"] = run_result_to_json(result, &program);
  doc["workload"] = {{"samples_per_step", workload.samples_per_step},
                     {"tokens_per_sample", workload.tokens_per_sample}};
  return doc;
}

Timeline timeline_from_json(const json& document, const std::string& origin) {
  const JsonReader doc(document, origin);
  doc.expect_object();
  if (doc.get_string("format", "") != "stratsim.timeline")
    doc.fail("not a stratsim timeline (format must be \"stratsim.timeline\")");
  const std::int64_t version = doc.at("version").as_int();
  if (version == 2) return read_v2(doc);
  if (version == 1) return read_v1(doc);
  doc.at("version").fail(fmt::format("unsupported timeline version {} (expected 1 or 2)", version));
}

}  // namespace stratsim::core
