// Collective matching's cost (Google Benchmark): what `stratsim compare` and the viewer pay to pair
// every collective of a prediction with its measurement (op_matching.hpp).
//
//   * BM_MatchCollectives/R   match_collectives(predicted, measured) over R ranks
//   * BM_TimelineSide/R       timeline_side(): a timeline's collectives on R ranks, with its analysis
//   * BM_ReadProfilerTrace/E  parse_document + rank_trace_from_json of a Kineto GPU trace of E events
//
// Both runs are LLaMA-2 7B under FSDP x TP 8 on 1,024 ranks in full mode (synthetic_run.hpp),
// the measured one with every duration 10% longer, so every collective matches. The goal: 100,000
// collectives per run matched in under 1 s. Counters: collectives (per run), collectives_per_s.
#include <benchmark/benchmark.h>

#include <nlohmann/json.hpp>

#include "stratsim/core/json_reader.hpp"
#include "stratsim/core/op_matching.hpp"
#include "synthetic_run.hpp"

namespace {

using namespace stratsim::core;
using stratsim::bench::full_mode_run;
using stratsim::bench::llama_fsdp_tp_program;

Timeline timeline(int recorded, double stretch) {
  Timeline t;
  t.program = llama_fsdp_tp_program();
  t.result = full_mode_run(t.program, recorded);
  for (auto& rank : t.result.timings)
    for (OpTiming& op : rank) op.end = op.issue + (op.end - op.issue) * stretch;
  return t;
}

std::size_t collectives(const CollectiveSide& side) {
  std::size_t n = 0;
  for (const auto& rank : side.by_rank) n += rank.size();
  return n;
}

void BM_MatchCollectives(benchmark::State& state) {
  const int ranks = static_cast<int>(state.range(0));
  const CollectiveSide predicted = timeline_side(timeline(ranks, 1.0), "predicted");
  const CollectiveSide measured = timeline_side(timeline(ranks, 1.1), "measured");
  std::size_t matched = 0;
  for (auto _ : state) {
    const OpComparison comparison = match_collectives(predicted, measured);
    matched = comparison.matched.size();
    benchmark::DoNotOptimize(comparison.overall);
  }
  if (matched != collectives(predicted)) state.SkipWithError("not every collective matched");
  state.counters["collectives"] = static_cast<double>(collectives(predicted));
  state.counters["collectives_per_s"] =
      benchmark::Counter(static_cast<double>(collectives(predicted)), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_MatchCollectives)->Arg(8)->Arg(64)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond);

void BM_TimelineSide(benchmark::State& state) {
  const int ranks = static_cast<int>(state.range(0));
  const Timeline run = timeline(ranks, 1.0);
  std::size_t n = 0;
  for (auto _ : state) {
    const CollectiveSide side = timeline_side(run, "run");
    n = collectives(side);
    benchmark::DoNotOptimize(side.by_rank.data());
  }
  state.counters["collectives"] = static_cast<double>(n);
  state.counters["collectives_per_s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_TimelineSide)->Arg(8)->Arg(256)->Unit(benchmark::kMillisecond);

// A GPU trace as Kineto writes one: per step, compute kernels with their launches, and one NCCL
// all-reduce in ten with record_param_comms' arguments on the kernel.
std::string kineto_trace(int events) {
  nlohmann::json trace_events = nlohmann::json::array();
  const int per_step = 10000;
  double ts = 1000;
  for (int i = 0; i < events / 2; ++i) {
    if (i % per_step == 0)
      trace_events.push_back({{"ph", "X"},
                              {"cat", "user_annotation"},
                              {"name", "ProfilerStep#" + std::to_string(i / per_step)},
                              {"pid", 1},
                              {"tid", 1},
                              {"ts", ts},
                              {"dur", per_step * 10.0}});
    const bool nccl = i % 10 == 9;
    trace_events.push_back({{"ph", "X"},
                            {"cat", "cuda_runtime"},
                            {"name", "cudaLaunchKernel"},
                            {"pid", 1},
                            {"tid", 1},
                            {"ts", ts},
                            {"dur", 2.0},
                            {"args", {{"correlation", i}}}});
    nlohmann::json args = {{"device", 0}, {"stream", nccl ? 40 : 7}, {"correlation", i}};
    if (nccl)
      args.update({{"Collective name", "allreduce"},
                   {"In msg nelems", 1 << 20},
                   {"Out msg nelems", 1 << 20},
                   {"Group size", 8},
                   {"dtype", "BFloat16"},
                   {"Process Group Name", "0"},
                   {"Process Group Ranks", "[0, 1, 2, 3, 4, 5, 6, 7]"}});
    trace_events.push_back({{"ph", "X"},
                            {"cat", "kernel"},
                            {"name", nccl ? "ncclDevKernel_AllReduce_Sum_bf16_RING_LL" : "sm90_xmma_gemm_bf16bf16"},
                            {"pid", 0},
                            {"tid", nccl ? 40 : 7},
                            {"ts", ts + 5},
                            {"dur", 8.0},
                            {"args", args}});
    ts += 10;
  }
  return nlohmann::json{{"schemaVersion", 1},
                        {"distributedInfo", {{"backend", "nccl"}, {"rank", 0}, {"world_size", 8}}},
                        {"traceEvents", trace_events}}
      .dump();
}

void BM_ReadProfilerTrace(benchmark::State& state) {
  const std::string text = kineto_trace(static_cast<int>(state.range(0)));
  std::size_t collectives = 0;
  for (auto _ : state) {
    const RankTrace rank = rank_trace_from_json(parse_document(text, "trace.json", false), "trace.json");
    collectives = rank.collectives.size();
  }
  state.counters["collectives"] = static_cast<double>(collectives);
  state.counters["file_MiB"] = static_cast<double>(text.size()) / (1024.0 * 1024.0);
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(state.range(0)), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_ReadProfilerTrace)->Arg(20000)->Arg(200000)->Arg(2000000)->Unit(benchmark::kMillisecond);

}  // namespace
