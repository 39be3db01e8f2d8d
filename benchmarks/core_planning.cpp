// Planning cost of the strategy core (Google Benchmark).
//
//   * BM_PlanLayers/{ddp,fsdp}/L      planning time against layer count (LLaMA-style, hidden 256)
//   * BM_PlanWorld/W                  a 96-layer GPT-3-175B under FSDP x TP on W ranks
//   * BM_ProgramJson/W                program_to_json of that plan (the consumer-facing form)
//   * BM_LoadModel*                   zoo -> Model: document building and parsing
//
// Counters: ops (program ops, all iterations), collectives (last iteration, as CommDebugMode
// counts them), layers, world, program_MiB (estimated heap footprint of the PlanResult),
// json_MiB (bytes of program_to_json(...).dump()), rss_MiB (the process's peak RSS so far).
// benchmarks/README.md has the figures and how to run them.
#include <sys/resource.h>

#include <cstdint>
#include <map>
#include <memory>
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

// --- models and plans, built once outside the timed loops ------------------------------------------

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

const Model& llama_model(std::int64_t layers) {
  static std::map<std::int64_t, std::unique_ptr<Model>> cache;
  auto& slot = cache[layers];
  if (!slot) {
    const json doc = transformer_document(small_llama(layers));
    slot = std::make_unique<Model>(parse_model(JsonReader(doc, "bench:llama")));
  }
  return *slot;
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
  return make_plan({{"world_size", 8},
                    {"batch_size", 1},
                    {"steps",
                     {{{"fully_shard",
                        {{"module", ""}, {"policy", {{"module_types", {"TransformerBlock"}}}}}}}}}},
                   "bench:fsdp");
}

// FSDP (per Block, dp) x Megatron TP (tp) on a [world / tp, tp] mesh; tp = 8 from 16 ranks up.
int tp_degree(int world) { return world >= 16 ? 8 : world / 2; }

Plan gpt_2d_plan(int world) {
  const int tp = tp_degree(world);
  json tp_plan = {{"h.*.attn.c_attn", "colwise"},
                  {"h.*.attn.c_proj", "rowwise"},
                  {"h.*.mlp.c_fc", "colwise"},
                  {"h.*.mlp.c_proj", "rowwise"}};
  return make_plan({{"world_size", world},
                    {"mesh", {{"shape", {world / tp, tp}}, {"dim_names", {"dp", "tp"}}}},
                    {"batch_size", 1},
                    {"steps",
                     {{{"parallelize_module", {{"module", ""}, {"mesh_dim", "tp"}, {"plan", tp_plan}}}},
                      {{"fully_shard",
                        {{"module", ""}, {"mesh_dim", "dp"}, {"policy", {{"module_types", {"Block"}}}}}}}}}},
                   "bench:gpt-2d");
}

// --- measurement helpers -------------------------------------------------------------------------

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

std::size_t string_heap(const std::string& s) { return s.capacity() > 15 ? s.capacity() + 1 : 0; }

// Heap bytes held by a PlanResult's program and collective records (a lower bound: allocator
// overhead is not counted). The program is what a consumer keeps; the records are the report.
double result_mib(const PlanResult& result) {
  std::size_t bytes = result.program.ops.capacity() * sizeof(ProgramOp);
  for (const ProgramOp& op : result.program.ops) {
    bytes += string_heap(op.name) + string_heap(op.module) + string_heap(op.op_class) + string_heap(op.comm_key) +
             string_heap(op.reason) + op.deps.capacity() * sizeof(int) +
             op.params.capacity() * sizeof(std::string);
    for (const std::string& p : op.params) bytes += string_heap(p);
  }
  for (const IterationRecord& it : result.iterations) {
    bytes += it.collectives.capacity() * sizeof(CollectiveRecord);
    for (const CollectiveRecord& c : it.collectives) {
      bytes += string_heap(c.op) + string_heap(c.group) + string_heap(c.module) + string_heap(c.reason) +
               c.params.capacity() * sizeof(std::string);
      for (const std::string& p : c.params) bytes += string_heap(p);
    }
  }
  for (const auto& ranks : result.group_ranks) bytes += ranks.capacity() * sizeof(int);
  return static_cast<double>(bytes) / kMiB;
}

void plan_counters(benchmark::State& state, const PlanResult& result) {
  state.counters["ops"] = static_cast<double>(result.program.ops.size());
  state.counters["collectives"] =
      result.iterations.empty() ? 0.0 : static_cast<double>(result.iterations.back().collectives.size());
  state.counters["program_MiB"] = result_mib(result);
  state.counters["rss_MiB"] = peak_rss_mib();
}

// --- (1) planning time against layer count --------------------------------------------------------

void plan_layers(benchmark::State& state, const Plan& plan) {
  const std::int64_t layers = state.range(0);
  const Model& model = llama_model(layers);  // built (and cached) outside the timed loop
  PlanOptions options;
  options.rank = 1;
  for (auto _ : state) {
    PlanResult result = plan_training(model, plan, options);
    benchmark::DoNotOptimize(result.program.ops.data());
    benchmark::ClobberMemory();
  }
  const PlanResult result = plan_training(model, plan, options);
  plan_counters(state, result);
  state.counters["layers"] = static_cast<double>(layers);
  state.counters["params"] = static_cast<double>(model.params.size());
  // Seconds of planning per layer (printed with an SI prefix: 12.3u = 12.3 us).
  state.counters["per_layer"] = benchmark::Counter(static_cast<double>(layers),
                                                   benchmark::Counter::kIsIterationInvariantRate |
                                                       benchmark::Counter::kInvert);
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
BENCHMARK(BM_PlanLayers_DDP)->RangeMultiplier(10)->Range(10, 10000)->Unit(benchmark::kMillisecond)->Complexity();
BENCHMARK(BM_PlanLayers_FSDP)->RangeMultiplier(10)->Range(10, 10000)->Unit(benchmark::kMillisecond)->Complexity();

// --- (2) planning time against world size, GPT-3 175B, FSDP x TP ---------------------------------

void BM_PlanWorld_GPT3_FSDP_TP(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0));
  const Model& model = gpt3_model();
  const Plan plan = gpt_2d_plan(world);
  PlanOptions options;
  options.rank = world - 1;  // the last rank: its group-rank lists are the furthest from rank 0
  for (auto _ : state) {
    PlanResult result = plan_training(model, plan, options);
    benchmark::DoNotOptimize(result.program.ops.data());
    benchmark::ClobberMemory();
  }
  const PlanResult result = plan_training(model, plan, options);
  plan_counters(state, result);
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

// --- (4) model loading ----------------------------------------------------------------------------

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

}  // namespace
