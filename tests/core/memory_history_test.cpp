// The planned rank's allocation history (PlanResult::memory_events) and the reserved peak the
// caching allocator model gives for it: the history is the memory report's own account, tensor by
// tensor (its running sum reaches the report's peak); FSDP's buffers come from the pools of the
// streams PyTorch allocates them on; and against ten recorded histories of one H200 (Llama 3.1 8B
// widths, FSDP2, PyTorch 2.11) the predicted reserved peak lands within a few percent.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "../cli_support.hpp"
#include "planner_test_support.hpp"
#include "stratsim/core/caching_allocator.hpp"
#include "stratsim/core/model_io.hpp"
#include "stratsim/core/plan.hpp"

namespace stratsim::test {
namespace {

using core::MemoryEvent;

// Llama 3.1 8B's widths at `layers` blocks, batch 2 of 8,192 tokens, as llama_step.py trains it.
std::string llama(int layers) {
  return "zoo:gpt:layers=" + std::to_string(layers) +
         ",hidden=4096,heads=32,kv_heads=8,ffn=14336,vocab=128256,seq=8192,norm=fused";
}

// llama_step.py's plan: FSDP2 per block then the root, bfloat16 params, float32 reduce.
std::string fsdp2_plan(int world, const std::string& checkpoint, const std::string& version = "2.11") {
  const std::string mp = R"("mp_policy": {"param_dtype": "bfloat16", "reduce_dtype": "float32"})";
  std::string steps;
  if (checkpoint == "full") steps += R"({"checkpoint": {"module": "layers.*"}},)";
  if (checkpoint == "selective_op") steps += R"({"checkpoint": {"module": "layers.*", "policy": "selective_op"}},)";
  steps +=
      R"({"torch.distributed.fsdp.fully_shard": {"module": "layers.*", "reshard_after_forward": true, )" + mp + "}},";
  steps += R"({"torch.distributed.fsdp.fully_shard": {"module": "", )" + mp + "}}";
  return R"({"world_size": )" + std::to_string(world) + R"(, "batch_size": 2, "torch_version": ")" + version +
         R"(", "optimizer": {"type": "adamw", "max_norm": 1.0}, "steps": [)" + steps + "]}";
}

struct Case {
  const char* name;
  std::string model, plan;
};

std::vector<Case> cases() {
  return {{"ddp", "zoo:Net", core::plan_document("builtin:ddp").dump()},
          {"fsdp", "zoo:Net", core::plan_document("builtin:fsdp").dump()},
          {"fsdp_tp", "zoo:TestModel", core::plan_document("builtin:fsdp-tp").dump()},
          {"ddp_tp", "zoo:Net", core::plan_document("builtin:ddp-tp").dump()},
          {"fsdp2_world1", llama(2), fsdp2_plan(1, "selective_op")},
          {"fsdp2_world8_full_ac", llama(2), fsdp2_plan(8, "full", "2.6")}};
}

int stream_index(const PlanResult& result, const std::string& name) {
  const auto& streams = result.memory_streams;
  const auto it = std::find(streams.begin(), streams.end(), name);
  return it == streams.end() ? -1 : static_cast<int>(it - streams.begin());
}

// Every tensor is taken once and given back at most once, after it was taken, on its own pool.
TEST(MemoryHistory, EveryTensorIsTakenOnceAndGivenBackAtMostOnce) {
  for (const Case& c : cases()) {
    const PlanResult result = run_plan(c.model, c.plan, 0, 3);
    ASSERT_FALSE(result.memory_events.empty()) << c.name;
    std::map<int, MemoryEvent> live;
    std::set<int> taken;
    for (const MemoryEvent& event : result.memory_events) {
      ASSERT_GT(event.bytes, 0) << c.name;
      ASSERT_LT(event.stream, static_cast<int>(result.memory_streams.size())) << c.name;
      if (event.allocate) {
        EXPECT_TRUE(taken.insert(event.tensor).second) << c.name << ": tensor " << event.tensor << " taken twice";
        live[event.tensor] = event;
        continue;
      }
      const auto it = live.find(event.tensor);
      ASSERT_NE(it, live.end()) << c.name << ": tensor " << event.tensor << " given back but not held";
      EXPECT_EQ(it->second.bytes, event.bytes) << c.name;
      EXPECT_EQ(it->second.stream, event.stream) << c.name;
      live.erase(it);
    }
  }
}

// A steady iteration gives back everything it takes (zero_grad included): op outputs, saved
// tensors, outputs selective checkpointing cached, FSDP's buffers. What is left would grow the
// reserved peak every step. Only setup (iteration 0: parameters, buckets) and the first step
// (the optimizer's state) keep storage.
TEST(MemoryHistory, ASteadyIterationGivesBackEverythingItTakes) {
  std::vector<Case> all = cases();
  all.push_back({"fsdp2_world8_selective_ac", llama(2), fsdp2_plan(8, "selective_op", "2.6")});
  all.push_back({"fsdp2_world1_no_ac", llama(2), fsdp2_plan(1, "none")});
  for (const Case& c : all) {
    const PlanResult result = run_plan(c.model, c.plan, 0, 3);
    std::map<int, int> taken_in;  // tensor -> the iteration that took it, while held
    for (const MemoryEvent& event : result.memory_events)
      if (event.allocate) taken_in[event.tensor] = event.iteration;
      else taken_in.erase(event.tensor);
    for (const auto& [tensor, iteration] : taken_in)
      EXPECT_LE(iteration, 1) << c.name << ": tensor " << tensor << " taken in iteration " << iteration
                              << " is still held after the last";
  }
}

// An op's output is taken when the op writes it and given back after its last reader, unless
// backward saved it. In a fully checkpointed block's first pass nothing is saved, so SwiGLU's four
// t x ffn tensors (w1's and w3's outputs, silu's, their product) come and go within the forward,
// as the recorded allocator histories show; the recomputation saves all four for backward, and
// backward makes a gradient for each.
TEST(MemoryHistory, AnOutputNothingSavesIsGivenBackAfterItsLastReader) {
  const PlanResult result = run_plan(llama(1), fsdp2_plan(1, "full"), 0, 2);
  const std::int64_t swiglu = 2LL * 8192 * 14336 * 2;  // batch 2 x 8,192 tokens x ffn, bfloat16
  std::map<std::pair<Phase, bool>, int> events;        // (phase, taken) -> count
  for (const MemoryEvent& event : result.memory_events)
    if (event.iteration == 2 && event.bytes == swiglu && event.op >= 0)
      ++events[{result.program.ops[event.op].phase, event.allocate}];
  EXPECT_EQ((events[{Phase::forward, true}]), 4) << "w1, silu, w3 and the product, in the first pass";
  EXPECT_EQ((events[{Phase::forward, false}]), 4) << "nothing saves them there";
  EXPECT_EQ((events[{Phase::recompute, true}]), 4) << "the recomputation makes them again";
  EXPECT_EQ((events[{Phase::recompute, false}]), 0) << "and saves them";
  // Backward writes their gradients (w2's input gradient, mul's two, silu's) and frees each once
  // the op that wrote the tensor has run its backward, with the four saved tensors.
  EXPECT_EQ((events[{Phase::backward, true}]), 4) << "the four gradients";
  EXPECT_EQ((events[{Phase::backward, false}]), 8) << "the four saved tensors and their gradients";
}

// Activation gradients, on z = d(b(h) + c(h)) with h = a(x): d's backward writes y's gradient
// (48 B), which the add hands to p and q as it is (one storage, no copy); c's backward writes h's
// (64 B); b's writes another, summed into it and freed, and its backward lets y's gradient go;
// a's backward reads h's gradient and lets it go. x needs no gradient.
TEST(MemoryHistory, ActivationGradientsLiveFromTheirWriterToTheTensorsWriter) {
  auto linear = [](const char* name, int in, int out) {
    return nlohmann::json{
        {"name", name}, {"type", "Linear"}, {"in_features", in}, {"out_features", out}, {"bias", false}};
  };
  auto call = [](const char* child, const char* in, const char* out) {
    return nlohmann::json{{"call", child}, {"in", in}, {"out", out}};
  };
  const nlohmann::json doc = {{"name", "Diamond"},
                              {"modules", {linear("a", 4, 8), linear("b", 8, 6), linear("c", 8, 6), linear("d", 6, 4)}},
                              {"forward",
                               {call("a", "x", "h"), call("b", "h", "p"), call("c", "h", "q"),
                                nlohmann::json{{"op", "add"}, {"in", {"p", "q"}}, {"out", "y"}}, call("d", "y", "z")}}};
  const PlanResult result = run_plan(model_from_json(doc), R"({"world_size": 1, "batch_size": 2, "steps": []})", 0, 1);
  std::vector<std::string> backward;  // "+48 d.backward": what backward took (+) and gave back (-)
  for (const MemoryEvent& event : result.memory_events) {
    if (event.op < 0) continue;  // the parameters, before any op
    const core::ProgramOp& op = result.program.ops[event.op];
    if (op.phase == Phase::backward && (event.bytes == 48 || event.bytes == 64))
      backward.push_back((event.allocate ? "+" : "-") + std::to_string(event.bytes) + " " + op.name);
  }
  const std::vector<std::string> expected = {
      "+48 d.backward",  // y's gradient
      "-48 d.backward",  // y, which d saved
      "+64 c.backward",  // h's gradient
      "+64 b.backward",  // b's part of it, summed in and freed
      "-64 b.backward",  //
      "-64 b.backward",  // h, which b and c saved
      "-48 b.backward",  // y's gradient, read by both branches
      "-64 a.backward",  // h's gradient
  };
  EXPECT_EQ(backward, expected);
}

// A tensor-parallel collective writes a new tensor, held like any op's output: the seed FSDP + TP
// plan's net1 input all-gather (4 x 10 float32, which net1 saves) and net2's output
// reduce-scatter (2 x 10, the model's output, held until backward has run).
TEST(MemoryHistory, ATensorParallelCollectivesOutputIsATensor) {
  const PlanResult result = run_plan("zoo:TestModel", core::plan_document("builtin:fsdp-tp").dump(), 0, 1);
  std::map<int, std::pair<std::string, std::string>> taken_and_given;  // tensor -> op names
  std::map<int, std::int64_t> bytes;
  for (const MemoryEvent& event : result.memory_events) {
    const std::string op = event.op < 0 ? "" : result.program.ops[event.op].name;
    if (event.allocate) taken_and_given[event.tensor].first = op;
    else taken_and_given[event.tensor].second = op;
    bytes[event.tensor] = event.bytes;
  }
  int gathered = 0, scattered = 0;
  for (const auto& [tensor, ops] : taken_and_given) {
    if (ops.first == "all_gather tp mlp.net1 input Shard(0)->Replicate()") {
      ++gathered;
      EXPECT_EQ(bytes[tensor], 4 * 10 * 4);
      EXPECT_EQ(ops.second, "mlp.net1.backward") << "net1 saved it";
    }
    if (ops.first == "reduce_scatter tp mlp.net2 output Partial()->Shard(0)" && bytes[tensor] == 2 * 10 * 4) {
      ++scattered;
      EXPECT_EQ(ops.second, "reduce_scatter fsdp unit TestModel (post-backward)") << "held through backward";
    }
  }
  EXPECT_EQ(gathered, 1);
  EXPECT_EQ(scattered, 1);
}

// The history is the report's account tensor by tensor: its running sum over the last iteration
// peaks at the report's (steady-state) peak, and the allocator replay allocates as much.
TEST(MemoryHistory, ItsRunningSumPeaksAtTheReportsPeak) {
  for (const Case& c : cases()) {
    const PlanResult result = run_plan(c.model, c.plan, 0, 3);
    std::int64_t live = 0, peak = 0;
    for (const MemoryEvent& event : result.memory_events) {
      if (event.iteration == 3 && peak == 0) peak = live;  // where the steady state starts
      live += event.allocate ? event.bytes : -event.bytes;
      if (event.iteration == 3) peak = std::max(peak, live);
    }
    EXPECT_EQ(peak, result.memory.peak) << c.name;
    // What was held at the peak, by kind, is the whole peak.
    const auto& at = result.memory.at_peak;
    EXPECT_EQ(at.resident + at.activations + at.unsharded_params + at.gradients + at.outputs_and_temporaries,
              result.memory.peak)
        << c.name;
    EXPECT_GE(at.outputs_and_temporaries, 0) << c.name;
    EXPECT_GE(result.memory.reserved_peak, result.memory.peak) << c.name;
    EXPECT_GE(result.memory.reserved_peak_expandable, result.memory.peak) << c.name;
  }
}

// FSDP2 at world size 8: the flat all-gather outputs come from the copy-in stream's pool, the
// reduced gradient shards from the reduce-scatter stream's (they outlive the backward, until
// zero_grad), the reduce-scatter inputs and unsharded parameters from the compute stream's.
TEST(MemoryHistory, Fsdp2BuffersComeFromTheirStreamsPools) {
  const PlanResult result = run_plan(llama(2), fsdp2_plan(8, "none", "2.6"), 0, 2);
  const int copy_in = stream_index(result, "fsdp.all_gather_copy_in");
  const int reduce_scatter = stream_index(result, "fsdp.reduce_scatter");
  ASSERT_GT(copy_in, 0);
  ASSERT_GT(reduce_scatter, 0);
  // One block: 218,112,000 parameters (the norms' 8,192 among them), a 27,264,000-element shard each.
  const std::int64_t block = 218'112'000, shard = block / 8;
  std::map<std::pair<int, std::int64_t>, int> taken;  // (stream, bytes) -> allocations in iteration 2
  for (const MemoryEvent& event : result.memory_events)
    if (event.allocate && event.iteration == 2) ++taken[{event.stream, event.bytes}];
  EXPECT_EQ((taken[{copy_in, block * 2}]), 4) << "each block gathered in forward and again in backward";
  EXPECT_EQ((taken[{reduce_scatter, shard * 4}]), 2) << "each block's float32 gradient shard";
  EXPECT_EQ((taken[{0, block * 4}]), 2) << "each block's float32 reduce-scatter input";
  EXPECT_EQ((taken[{0, 14336LL * 4096 * 2}]), 18) << "w1, w2, w3 unsharded twice a block, and their gradients";
}

// PyTorch's own reserved peaks of ten recorded runs on one H200 (2, 4 and 8 layers; no, selective
// and full checkpointing; default and expandable segments): benchmarks/accuracy/gpu/measured/h200/
// memory/. The prediction knows only the model and the plan.
struct Recorded {
  const char* name;
  int layers;
  const char* checkpoint;
};

class ReservedPeak : public testing::TestWithParam<Recorded> {};

std::int64_t recorded_reserved(const std::string& name) {
  const std::string path =
      std::string(STRATSIM_SOURCE_DIR) + "/benchmarks/accuracy/gpu/measured/h200/memory/" + name + ".json.gz";
  return core::read_allocator_trace(path).recorded_reserved_peak.value();
}

TEST_P(ReservedPeak, IsPyTorchsOnOneH200) {
  const Recorded& run = GetParam();
  const PlanResult result = run_plan(llama(run.layers), fsdp2_plan(1, run.checkpoint), 0, 2);
  const double expandable = static_cast<double>(recorded_reserved(std::string(run.name) + "_expandable"));
  const double standard = static_cast<double>(recorded_reserved(run.name));
  // Measured: -0.4 to 0.0 % with expandable segments, -0.6 to +0.5 % with the default ones (-3.5
  // to +7.8 % before op outputs nothing saves were held until their last reader).
  EXPECT_NEAR(static_cast<double>(result.memory.reserved_peak_expandable) / expandable, 1.0, 0.01);
  EXPECT_NEAR(static_cast<double>(result.memory.reserved_peak) / standard, 1.0, 0.015);
}

INSTANTIATE_TEST_SUITE_P(OneH200, ReservedPeak,
                         testing::Values(Recorded{"llama2_selective_op", 2, "selective_op"},
                                         Recorded{"llama4_selective_op", 4, "selective_op"},
                                         Recorded{"llama4_none", 4, "none"}, Recorded{"llama4_full", 4, "full"},
                                         Recorded{"llama8_selective_op", 8, "selective_op"}),
                         [](const testing::TestParamInfo<Recorded>& info) { return std::string(info.param.name); });

// Fragmentation past the device: allocated fits, reserved does not. TestModel's 2.2 KiB peak
// reserves three 2 MiB small-pool segments (the compute, unshard and reduce-scatter streams').
TEST(MemoryHistory, AReservedPeakPastTheDeviceIsAWarningNotAnOutOfMemory) {
  nlohmann::json plan = core::plan_document("builtin:fsdp-tp");
  plan["device_memory_gb"] = 4.0 / 1024;
  const PlanResult result = run_plan("zoo:TestModel", plan.dump(), 0, 1);
  EXPECT_FALSE(result.memory.out_of_memory);
  EXPECT_EQ(result.memory.reserved_peak, 3 * (2 << 20));
  ASSERT_EQ(result.warnings.size(), 1u);
  EXPECT_NE(result.warnings[0].find("memory fragmentation: the caching allocator would reserve"), std::string::npos)
      << result.warnings[0];
}

// `plan --memory-history` writes what `allocator` replays, to the report's reserved peaks.
TEST(MemoryHistoryCli, PlanWritesAHistoryTheAllocatorReplays) {
  const std::string history = temp_path("planned_history.json");
  std::filesystem::remove(history);
  const CliRun plan = run_cli("plan --model zoo:TestModel --plan builtin:fsdp-tp --json --memory-history " + history);
  ASSERT_EQ(plan.code, 0) << plan.out;
  const auto memory = nlohmann::json::parse(plan.out)["memory"];
  const CliRun replay = run_cli("allocator --json " + history, true);
  ASSERT_EQ(replay.code, 0) << replay.out;
  const auto replayed = nlohmann::json::parse(replay.out);
  EXPECT_EQ(replayed["default_segments"]["reserved_peak_bytes"], memory["reserved_peak"]);
  EXPECT_EQ(replayed["expandable_segments"]["reserved_peak_bytes"], memory["reserved_peak_expandable"]);
  const CliRun text = run_cli("allocator " + history, true);
  EXPECT_NE(text.out.find("written by stratsim plan"), std::string::npos) << text.out;
}

}  // namespace
}  // namespace stratsim::test
