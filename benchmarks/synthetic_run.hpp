// A realistic large run for the timeline benchmarks (core_timeline.cpp, gui_timeline.cpp): the
// LLaMA-2 7B FSDP x TP 8 program on 1,024 ranks (1,033 ops, from the planner) and a full-mode
// result over the first R ranks with every group instance of every collective.
#pragma once

#include <algorithm>
#include <nlohmann/json.hpp>

#include "stratsim/core/json_reader.hpp"
#include "stratsim/core/model_io.hpp"
#include "stratsim/core/plan.hpp"
#include "stratsim/core/planner.hpp"
#include "stratsim/core/timeline.hpp"

namespace stratsim::bench {

using namespace stratsim::core;

inline constexpr int kWorld = 1024, kTp = 8;

inline const Program& llama_fsdp_tp_program() {
  static const Program program = [] {
    using json = nlohmann::json;
    const json tp_plan = {{"layers.*.attention.wq", "colwise"},    {"layers.*.attention.wk", "colwise"},
                          {"layers.*.attention.wv", "colwise"},    {"layers.*.attention.wo", "rowwise"},
                          {"layers.*.feed_forward.w1", "colwise"}, {"layers.*.feed_forward.w3", "colwise"},
                          {"layers.*.feed_forward.w2", "rowwise"}};
    const json doc = {
        {"world_size", kWorld},
        {"mesh", {{"shape", {kWorld / kTp, kTp}}, {"dim_names", {"dp", "tp"}}}},
        {"batch_size", 1},
        {"iterations", 1},
        {"steps",
         {{{"parallelize_module", {{"module", ""}, {"mesh_dim", "tp"}, {"plan", tp_plan}}}},
          {{"fully_shard",
            {{"module", ""}, {"mesh_dim", "dp"}, {"policy", {{"module_types", {"TransformerBlock"}}}}}}}}}};
    const Plan plan = parse_plan(JsonReader(doc, "bench"));
    return plan_training(load_model("zoo:llama2-7b"), plan).program;
  }();
  return program;
}

// Full mode over the first `recorded` ranks: per rank, each stream's ops back to back (10 us
// each), the rank skewed by 1 ns; every group instance of every collective.
inline RunResult full_mode_run(const Program& program, int recorded) {
  RunResult result;
  result.mode = "full";
  result.platform = "synthetic";
  result.world_size = program.world_size;
  for (int rank = 0; rank < recorded; ++rank) {
    std::vector<double> stream_end(program.streams.size(), rank * 1e-9);
    std::vector<OpTiming> timings(program.ops.size());
    for (const ProgramOp& op : program.ops) {
      double ready = stream_end[op.stream];
      for (int dep : op.deps) ready = std::max(ready, timings[dep].end);
      timings[op.id] = {ready, ready, ready + 1e-5};
      stream_end[op.stream] = timings[op.id].end;
    }
    result.recorded.push_back({rank});
    result.timings.push_back(std::move(timings));
  }
  for (const ProgramOp& op : program.ops) {
    if (op.type != OpType::collective) continue;
    const auto groups = program.all_groups(op.group);
    for (std::size_t instance = 0; instance < groups.size(); ++instance) {
      const OpTiming& t = result.timings.front()[op.id];
      result.collectives.push_back({op.id, static_cast<int>(instance), "ring", static_cast<double>(op.bytes),
                                    static_cast<int>(groups[instance].size()), t.start, t.end, groups[instance]});
    }
  }
  for (const auto& timings : result.timings)
    for (const OpTiming& t : timings) result.makespan = std::max(result.makespan, t.end);
  result.iteration_end = {result.makespan};
  return result;
}

}  // namespace stratsim::bench
