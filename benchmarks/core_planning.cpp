// Planning cost of the strategy core (Google Benchmark).
//
//   * BM_PlanWorld_GPT3_FSDP_TP/W     a 96-layer GPT-3 175B under FSDP x TP on W ranks
//   * BM_ProgramJson_GPT3_FSDP_TP/W   program_to_json(...).dump() of that plan's program
//   * BM_LoadModel_GPT3               zoo -> Model, end to end
//   * BM_ModelDocument_Llama/L        transformer_document (the JSON model document) against layers
//   * BM_ParseModel_Llama/L           parse_model of that document against layers
//   * BM_PlanLayers_{DDP,FSDP}/L      planning time against layer count (LLaMA-style, hidden 256)
//   * BM_PlanLayers_FSDP_AC_PerLayer/L  the same with checkpoint + fully_shard called per block
//
// Counters: ops (program ops, all iterations), collectives (last iteration, as CommDebugMode
// counts them), layers, world, heap_MiB (heap held by the returned PlanResult), json_MiB (bytes
// of program_to_json(...).dump()), rss_MiB (the process's peak RSS so far).
// benchmarks/README.md has the figures and how to run them.
#include <malloc.h>
#include <sys/resource.h>

#include <cstdint>
#include <string>

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include "stratsim/core/json_reader.hpp"
#include "stratsim/core/model_io.hpp"
#include "stratsim/core/plan.hpp"
#include "stratsim/core/planner.hpp"
#include "stratsim/core/program.hpp"

namespace {

using namespace stratsim::core;
using json = nlohmann::json;

constexpr double kMiB = 1024.0 * 1024.0;

// --- models and plans, built outside the timed loops ---------------------------------------------

TransformerConfig small_llama(std::int64_t layers) {
  TransformerConfig c;
  c.style = "llama";
  c.layers = layers;
  c.hidden = 256;
  c.heads = 4;
  c.kv_heads = 4;
  c.ffn = 688;
  c.vocab = 1024;
  c.seq = 128;
  return c;
}

// Built per benchmark run, outside the timed loop, and dropped when the run ends: keeping a
// 10,000-layer model alive across later benchmarks fragments the heap and slows them by up to 2x.
Model llama_model(std::int64_t layers) {
  const json doc = transformer_document(small_llama(layers));
  return parse_model(JsonReader(doc, "bench:llama"));
}

const Model& gpt3_model() {
  static const Model model = load_model("zoo:gpt3-175b");
  return model;
}

Plan make_plan(const json& doc, const std::string& origin) { return parse_plan(JsonReader(doc, origin)); }

// DDP: replicate() on the root, 8 ranks.
Plan ddp_plan() {
  return make_plan({{"world_size", 8}, {"batch_size", 1}, {"steps", {{{"replicate", {{"module", ""}}}}}}}, "bench:ddp");
}

// FSDP: fully_shard on the root with one unit per TransformerBlock, 8 ranks.
Plan fsdp_plan() {
  return make_plan(
      {{"world_size", 8},
       {"batch_size", 1},
       {"steps", {{{"fully_shard", {{"module", ""}, {"policy", {{"module_types", {"TransformerBlock"}}}}}}}}}},
      "bench:fsdp");
}

// torchtitan's loop: checkpoint(layer) and fully_shard(layer) for every block, then fully_shard on
// the root: 2 L + 1 plan steps, each naming its module.
// `call` is FSDP1's composable fully_shard or FSDP2's (torch_version 2.15).
Plan per_layer_fsdp_ac_plan(std::int64_t layers, const std::string& call = "fully_shard") {
  json steps = json::array();
  for (std::int64_t i = 0; i < layers; ++i) {
    const std::string layer = "layers." + std::to_string(i);
    steps.push_back({{"checkpoint", {{"module", layer}}}});
    steps.push_back({{call, {{"module", layer}}}});
  }
  steps.push_back({{call, {{"module", ""}}}});
  json doc = {{"world_size", 8}, {"batch_size", 1}, {"steps", std::move(steps)}};
  if (call != "fully_shard") doc["torch_version"] = "2.15";
  return make_plan(std::move(doc), "bench:fsdp-ac-per-layer");
}

// FSDP (per Block, dp) x Megatron TP (tp) on a [world / tp, tp] mesh; tp = 8 from 16 ranks up.
int tp_degree(int world) { return world >= 16 ? 8 : world / 2; }

Plan gpt_2d_plan(int world) {
  const int tp = tp_degree(world);
  json tp_plan = {{"h.*.attn.c_attn", "colwise"},
                  {"h.*.attn.c_proj", "rowwise"},
                  {"h.*.mlp.c_fc", "colwise"},
                  {"h.*.mlp.c_proj", "rowwise"}};
  return make_plan(
      {{"world_size", world},
       {"mesh", {{"shape", {world / tp, tp}}, {"dim_names", {"dp", "tp"}}}},
       {"batch_size", 1},
       {"steps",
        {{{"parallelize_module", {{"module", ""}, {"mesh_dim", "tp"}, {"plan", tp_plan}}}},
         {{"fully_shard", {{"module", ""}, {"mesh_dim", "dp"}, {"policy", {{"module_types", {"Block"}}}}}}}}}},
      "bench:gpt-2d");
}

// --- measurement helpers -------------------------------------------------------------------------

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

// Bytes the allocator has handed out and not had back (glibc: arena chunks + mmapped chunks).
double heap_in_use() {
  const struct mallinfo2 info = mallinfo2();
  return static_cast<double>(info.uordblks + info.hblkhd);
}

// Times plan_training(model, plan) and reports what it produced. The memory counters come from
// one more, untimed run: heap_MiB is the heap the returned PlanResult holds (program + collective
// records + reports), rss_MiB the process's peak RSS so far (a high-water mark over the whole run).
void run_plan(benchmark::State& state, const Model& model, const Plan& plan, const PlanOptions& options) {
  for (auto _ : state) {
    PlanResult result = plan_training(model, plan, options);
    benchmark::DoNotOptimize(result.program.ops.data());
    benchmark::ClobberMemory();
  }
  const double before = heap_in_use();
  const PlanResult result = plan_training(model, plan, options);
  state.counters["heap_MiB"] = (heap_in_use() - before) / kMiB;
  state.counters["rss_MiB"] = peak_rss_mib();
  state.counters["ops"] = static_cast<double>(result.program.ops.size());
  // CommDebugMode's view: the collectives of the last (steady-state) iteration.
  state.counters["collectives"] =
      result.iterations.empty() ? 0.0 : static_cast<double>(result.iterations.back().collectives.size());
}

// --- planning time against world size: GPT-3 175B, FSDP x TP -----------------------------------

void BM_PlanWorld_GPT3_FSDP_TP(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0));
  const Model& model = gpt3_model();
  const Plan plan = gpt_2d_plan(world);
  // The last rank: its group-rank lists are the furthest from rank 0.
  run_plan(state, model, plan, PlanOptions{world - 1, 0});
  state.counters["world"] = world;
  state.counters["tp"] = tp_degree(world);
  state.counters["layers"] = 96;
  state.SetComplexityN(world);
}
BENCHMARK(BM_PlanWorld_GPT3_FSDP_TP)->RangeMultiplier(4)->Range(2, 16384)->Unit(benchmark::kMillisecond)->Complexity();

// The JSON form of the same program (what the CLI writes and consumers read); timed separately so
// BM_PlanWorld stays the planner alone.
void BM_ProgramJson_GPT3_FSDP_TP(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0));
  const PlanResult result = plan_training(gpt3_model(), gpt_2d_plan(world), PlanOptions{world - 1, 0});
  std::size_t bytes = 0;
  for (auto _ : state) {
    std::string text = program_to_json(result.program).dump();
    bytes = text.size();
    benchmark::DoNotOptimize(text.data());
  }
  state.counters["ops"] = static_cast<double>(result.program.ops.size());
  state.counters["json_MiB"] = static_cast<double>(bytes) / kMiB;
  state.counters["world"] = world;
  state.counters["rss_MiB"] = peak_rss_mib();
}
BENCHMARK(BM_ProgramJson_GPT3_FSDP_TP)->Arg(16384)->Unit(benchmark::kMillisecond);

// --- model loading (zoo -> Model) ----------------------------------------------------------------

// zoo spec -> Model, end to end (document building + parsing).
void BM_LoadModel_GPT3(benchmark::State& state) {
  for (auto _ : state) {
    Model model = load_model("zoo:gpt3-175b");
    benchmark::DoNotOptimize(model.params.data());
  }
  const Model model = load_model("zoo:gpt3-175b");
  state.counters["modules"] = static_cast<double>(model.modules.size());
  state.counters["params"] = static_cast<double>(model.params.size());
}
BENCHMARK(BM_LoadModel_GPT3)->Unit(benchmark::kMillisecond);

// The two halves against layer count: building the JSON document, then parsing it into a Model.
void BM_ModelDocument_Llama(benchmark::State& state) {
  const TransformerConfig config = small_llama(state.range(0));
  for (auto _ : state) {
    json doc = transformer_document(config);
    benchmark::DoNotOptimize(&doc);
  }
  state.counters["layers"] = static_cast<double>(state.range(0));
  state.SetComplexityN(state.range(0));
}
BENCHMARK(BM_ModelDocument_Llama)->RangeMultiplier(10)->Range(10, 10000)->Unit(benchmark::kMillisecond)->Complexity();

void BM_ParseModel_Llama(benchmark::State& state) {
  const json doc = transformer_document(small_llama(state.range(0)));
  std::size_t modules = 0;
  for (auto _ : state) {
    Model model = parse_model(JsonReader(doc, "bench:llama"));
    modules = model.modules.size();
    benchmark::DoNotOptimize(model.params.data());
  }
  state.counters["layers"] = static_cast<double>(state.range(0));
  state.counters["modules"] = static_cast<double>(modules);
  state.SetComplexityN(state.range(0));
}
BENCHMARK(BM_ParseModel_Llama)->RangeMultiplier(10)->Range(10, 10000)->Unit(benchmark::kMillisecond)->Complexity();

// --- planning time against layer count (run last: the largest heaps) -----------------------------

void plan_layers(benchmark::State& state, const Plan& plan) {
  const std::int64_t layers = state.range(0);
  const Model model = llama_model(layers);
  run_plan(state, model, plan, PlanOptions{1, 0});
  state.counters["layers"] = static_cast<double>(layers);
  state.counters["params"] = static_cast<double>(model.params.size());
  // Seconds of planning per layer (printed with an SI prefix: 12.3u = 12.3 us).
  state.counters["per_layer"] = benchmark::Counter(
      static_cast<double>(layers), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.SetComplexityN(layers);
}

void BM_PlanLayers_DDP(benchmark::State& state) {
  static const Plan plan = ddp_plan();
  plan_layers(state, plan);
}
void BM_PlanLayers_FSDP(benchmark::State& state) {
  static const Plan plan = fsdp_plan();
  plan_layers(state, plan);
}
void BM_PlanLayers_FSDP_AC_PerLayer(benchmark::State& state) {
  plan_layers(state, per_layer_fsdp_ac_plan(state.range(0)));
}
// The same with FSDP2: one parameter group per block, each parameter padded on its own.
void BM_PlanLayers_FSDP2_AC_PerLayer(benchmark::State& state) {
  plan_layers(state, per_layer_fsdp_ac_plan(state.range(0), "torch.distributed.fsdp.fully_shard"));
}
// torchtitan's 2-D plan (builtin:torchtitan-llama): the Llama TP plan with sequence parallelism
// and loss_parallel on tp = 4, FSDP2 per block (one "layers.*" step) and on the root on
// dp_shard = 2. DTensors flow between modules, so every block adds autograd nodes.
void BM_PlanLayers_FSDP2_TP_SP(benchmark::State& state) {
  static const Plan plan = load_plan("builtin:torchtitan-llama");
  plan_layers(state, plan);
}
BENCHMARK(BM_PlanLayers_DDP)->RangeMultiplier(10)->Range(10, 10000)->Unit(benchmark::kMillisecond)->Complexity();
BENCHMARK(BM_PlanLayers_FSDP)->RangeMultiplier(10)->Range(10, 10000)->Unit(benchmark::kMillisecond)->Complexity();
BENCHMARK(BM_PlanLayers_FSDP_AC_PerLayer)
    ->RangeMultiplier(10)
    ->Range(10, 10000)
    ->Unit(benchmark::kMillisecond)
    ->Complexity();
BENCHMARK(BM_PlanLayers_FSDP2_AC_PerLayer)
    ->RangeMultiplier(10)
    ->Range(10, 10000)
    ->Unit(benchmark::kMillisecond)
    ->Complexity();
BENCHMARK(BM_PlanLayers_FSDP2_TP_SP)
    ->RangeMultiplier(10)
    ->Range(10, 10000)
    ->Unit(benchmark::kMillisecond)
    ->Complexity();

}  // namespace
