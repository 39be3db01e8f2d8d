// Simulator cost (Google Benchmark): wall time and peak memory of one simulated training step
// against rank count and layer count. Planning happens outside the timed loop; every iteration is
// a whole simulate() call (fork, SimGrid engine, platform build, run, result back).
//
//   * BM_Simulate_Llama7B_FSDP/W      LLaMA-2 7B (32 layers), fully_shard per block on W ranks,
//                                     W/8 H100 nodes, rail-optimised fat-tree (contention on)
//   * BM_Simulate_Llama7B_DDP_TP/W    the same model, Megatron TP 8 inside a node x replicate over
//                                     W/8 nodes; two steps (DDP rebuilds its buckets after the first)
//   * BM_Simulate_Layers_FSDP/L       a LLaMA-7B-wide model with L layers, FSDP on 64 ranks
//   * BM_Simulate_FullMode_FSDP/W     every rank simulated (no symmetry), for comparison
//   * BM_Simulate_Unfolded_FSDP/W     representative mode without folding the network by node
//                                     symmetry: every node's flows simulated, for comparison
//
// Counters: step_s (simulated seconds of the last step), ops (program ops), flows (SimGrid comms
// started), collectives (group instances run), child_rss_MiB (peak RSS of the simulation process),
// folded_nodes (nodes simulated when the network was folded; 0 when not).
// benchmarks/README.md has the figures.
#include <sys/resource.h>

#include <string>

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include "stratsim/core/json_reader.hpp"
#include "stratsim/core/model_io.hpp"
#include "stratsim/core/plan.hpp"
#include "stratsim/core/planner.hpp"
#include "stratsim/sim/platform.hpp"
#include "stratsim/sim/simulator.hpp"

namespace {

using namespace stratsim;
using json = nlohmann::json;

core::Plan make_plan(const json& doc) { return core::parse_plan(core::JsonReader(doc, "bench")); }

core::Plan fsdp_plan(int world) {
  return make_plan({{"world_size", world},
                    {"batch_size", 1},
                    {"steps",
                     {{{"fully_shard",
                        {{"module", ""}, {"policy", {{"module_types", {"TransformerBlock"}}}}}}}}}});
}

core::Plan ddp_tp_plan(int world) {
  const int tp = 8;
  const json tp_plan = {{"layers.*.attention.wq", "colwise"}, {"layers.*.attention.wk", "colwise"},
                        {"layers.*.attention.wv", "colwise"}, {"layers.*.attention.wo", "rowwise"},
                        {"layers.*.feed_forward.w1", "colwise"}, {"layers.*.feed_forward.w3", "colwise"},
                        {"layers.*.feed_forward.w2", "rowwise"}};
  return make_plan({{"world_size", world},
                    {"mesh", {{"shape", {world / tp, tp}}, {"dim_names", {"dp", "tp"}}}},
                    {"batch_size", 1},
                    {"steps",
                     {{{"parallelize_module", {{"module", ""}, {"mesh_dim", "tp"}, {"plan", tp_plan}}}},
                      {{"replicate", {{"module", ""}, {"mesh_dim", "dp"}}}}}}});
}

double child_peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_CHILDREN, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

void run(benchmark::State& state, const core::Program& program, const sim::PlatformSpec& platform,
         sim::RankMode mode = sim::RankMode::automatic, bool fold = true) {
  sim::SimOptions options;
  options.mode = mode;
  options.fold = fold;
  sim::SimResult result;
  for (auto _ : state) {
    result = sim::simulate(program, platform, options);
  }
  const auto& ends = result.iteration_end;
  const double last_start = ends.size() > 1 ? ends[ends.size() - 2] : 0.0;
  state.counters["step_s"] = ends.empty() ? result.makespan : ends.back() - last_start;
  state.counters["makespan_s"] = result.makespan;
  state.counters["ops"] = static_cast<double>(program.ops.size());
  state.counters["flows"] = static_cast<double>(result.flows);
  state.counters["collectives"] = static_cast<double>(result.collectives.size());
  state.counters["child_rss_MiB"] = child_peak_rss_mib();
  state.counters["world"] = program.world_size;
  state.counters["folded_nodes"] = result.folded_nodes;
}

sim::PlatformSpec h100_cluster(int world) {
  return sim::parse_platform(world <= 8 ? "h100:gpus=" + std::to_string(world)
                                        : "h100:nodes=" + std::to_string(world / 8));
}

core::Program plan_program(const core::Model& model, const core::Plan& plan, int iterations) {
  core::PlanOptions options;
  options.iterations = iterations;
  return core::plan_training(model, plan, options).program;
}

const core::Model& llama7b() {
  static const core::Model model = core::load_model("zoo:llama2-7b");
  return model;
}

void BM_Simulate_Llama7B_FSDP(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0));
  run(state, plan_program(llama7b(), fsdp_plan(world), 1), h100_cluster(world));
}
BENCHMARK(BM_Simulate_Llama7B_FSDP)
    ->RangeMultiplier(4)
    ->Range(8, 16384)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->UseRealTime();

void BM_Simulate_Llama7B_DDP_TP(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0));
  run(state, plan_program(llama7b(), ddp_tp_plan(world), 2), h100_cluster(world));
}
BENCHMARK(BM_Simulate_Llama7B_DDP_TP)
    ->RangeMultiplier(4)
    ->Range(16, 16384)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->UseRealTime();

void BM_Simulate_Layers_FSDP(benchmark::State& state) {
  const core::Model model = core::load_model("zoo:llama2-7b:layers=" + std::to_string(state.range(0)));
  run(state, plan_program(model, fsdp_plan(64), 1), h100_cluster(64));
  state.counters["layers"] = static_cast<double>(state.range(0));
}
BENCHMARK(BM_Simulate_Layers_FSDP)
    ->RangeMultiplier(4)
    ->Range(2, 512)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->UseRealTime();

void BM_Simulate_FullMode_FSDP(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0));
  run(state, plan_program(llama7b(), fsdp_plan(world), 1), h100_cluster(world), sim::RankMode::full);
}
BENCHMARK(BM_Simulate_FullMode_FSDP)
    ->RangeMultiplier(4)
    ->Range(8, 512)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->UseRealTime();

void BM_Simulate_Unfolded_FSDP(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0));
  run(state, plan_program(llama7b(), fsdp_plan(world), 1), h100_cluster(world), sim::RankMode::representative, false);
}
BENCHMARK(BM_Simulate_Unfolded_FSDP)
    ->RangeMultiplier(4)
    ->Range(64, 4096)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->UseRealTime();

}  // namespace
