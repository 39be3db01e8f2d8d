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
#include "synthetic_run.hpp"

namespace {

using namespace stratsim::core;
using json = nlohmann::json;

constexpr double kMiB = 1024.0 * 1024.0;
using stratsim::bench::full_mode_run;
using stratsim::bench::llama_fsdp_tp_program;

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
