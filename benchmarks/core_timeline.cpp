// The timeline format's cost (Google Benchmark): what `simulate --timeline` pays to write a run
// and what the viewer pays to open it, against the op instances it holds.
//
//   * BM_TimelineWrite/R   timeline_json(program, result).dump()
//   * BM_TimelineRead/R    read_document(file): parse, validate, rebuild Program and RunResult
//
// The program is LLaMA-2 7B under FSDP x TP 8 on 1,024 ranks (1,033 ops, as the planner makes it);
// the run records R ranks in full mode (R x 1,033 op instances, 1,057,792 at R = 1,024) with every
// group instance of every collective, as the simulator's full mode writes them. Times follow a
// plausible schedule (ops back to back per stream, ranks skewed), which only the number formatting
// sees. Counters: op_instances, collective_instances, file_MiB, ops_per_s (op instances written or read
// per second).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "stratsim/core/document.hpp"
#include "stratsim/core/json_reader.hpp"
#include "stratsim/core/model_io.hpp"
#include "stratsim/core/plan.hpp"
#include "stratsim/core/planner.hpp"
#include "stratsim/core/timeline.hpp"

namespace {

using namespace stratsim::core;
using json = nlohmann::json;

constexpr int kWorld = 1024, kTp = 8;
constexpr double kMiB = 1024.0 * 1024.0;

const Program& llama_fsdp_tp_program() {
  static const Program program = [] {
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
RunResult full_mode_run(const Program& program, int recorded) {
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
    const auto groups = program.mesh.all_groups(program.groups[op.group].mesh_dims);
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

void counters(benchmark::State& state, const RunResult& result, std::size_t bytes) {
  const double ops = static_cast<double>(result.timings.size() * result.timings.front().size());
  state.counters["op_instances"] = ops;
  state.counters["collective_instances"] = static_cast<double>(result.collectives.size());
  state.counters["file_MiB"] = static_cast<double>(bytes) / kMiB;
  state.counters["ops_per_s"] = benchmark::Counter(ops, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_TimelineWrite(benchmark::State& state) {
  const Program& program = llama_fsdp_tp_program();
  const RunResult result = full_mode_run(program, static_cast<int>(state.range(0)));
  std::size_t bytes = 0;
  for (auto _ : state) {
    const std::string text = timeline_json(program, result).dump();
    bytes = text.size();
    benchmark::DoNotOptimize(text.data());
  }
  counters(state, result, bytes);
}
BENCHMARK(BM_TimelineWrite)->RangeMultiplier(8)->Range(1, 1024)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_TimelineRead(benchmark::State& state) {
  const Program& program = llama_fsdp_tp_program();
  const RunResult result = full_mode_run(program, static_cast<int>(state.range(0)));
  const auto path = std::filesystem::temp_directory_path() / "stratsim-bench-timeline.json";
  const std::string text = timeline_json(program, result).dump();
  std::ofstream(path, std::ios::binary) << text;
  for (auto _ : state) {
    const Document document = read_document(path.string());
    benchmark::DoNotOptimize(document.timeline.result.timings.data());
  }
  std::filesystem::remove(path);
  counters(state, result, text.size());
}
BENCHMARK(BM_TimelineRead)->RangeMultiplier(8)->Range(1, 1024)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
