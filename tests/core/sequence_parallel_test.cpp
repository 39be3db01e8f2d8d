// Modern tensor parallelism: SequenceParallel, PrepareModuleInput / PrepareModuleOutput,
// DTensors flowing between modules (use_local_output=False), loss_parallel and torchtitan's Llama
// plan. The exact collectives are checked against PyTorch 2.15 in golden_vectors_test.cpp
// (tests/data/golden/tp_sp.json); these tests pin the rules one at a time and the errors.
#include <gtest/gtest.h>

#include "planner_test_support.hpp"

using namespace stratsim::core;
using namespace stratsim::test;

namespace {

const char* kSmallLlama = "zoo:gpt:layers=2,hidden=64,heads=4,ffn=128,vocab=96,seq=8";

// torchtitan's Llama TP plan on a 1-D tp mesh of `tp` ranks, with sequence parallelism.
std::string torchtitan_tp_plan(int tp, bool loss_parallel, const std::string& extra_steps = "") {
  return R"J({"world_size": )J" + std::to_string(tp) + R"J(, "mesh": {"shape": [)J" + std::to_string(tp) +
         R"J(], "dim_names": ["tp"]},
    "batch_size": 2, "iterations": 1, "torch_version": "2.15", "loss_parallel": )J" +
         (loss_parallel ? "true" : "false") + R"J(,
    "steps": [
      {"parallelize_module": {"mesh_dim": "tp", "plan": {
        "tok_embeddings": {"style": "RowwiseParallel", "input_layouts": "Replicate()", "output_layouts": "Shard(1)"},
        "norm": "SequenceParallel",
        "output": {"style": "ColwiseParallel", "input_layouts": "Shard(1)",
                   "output_layouts": )J" +
         (loss_parallel ? R"J("Shard(-1)", "use_local_output": false)J" : R"J("Replicate()")J") + R"J(}}}},
      {"parallelize_module": {"module": "layers", "mesh_dim": "tp", "plan": {
        "*.attention_norm": "SequenceParallel",
        "*.attention": {"style": "PrepareModuleInput", "input_layouts": ["Shard(1)", null],
                        "desired_input_layouts": ["Replicate()", null]},
        "*.attention.wq": "ColwiseParallel", "*.attention.wk": "ColwiseParallel", "*.attention.wv": "ColwiseParallel",
        "*.attention.wo": {"style": "RowwiseParallel", "output_layouts": "Shard(1)"},
        "*.ffn_norm": "SequenceParallel",
        "*.feed_forward": {"style": "PrepareModuleInput", "input_layouts": ["Shard(1)"],
                           "desired_input_layouts": ["Replicate()"]},
        "*.feed_forward.w1": "ColwiseParallel",
        "*.feed_forward.w2": {"style": "RowwiseParallel", "output_layouts": "Shard(1)"},
        "*.feed_forward.w3": "ColwiseParallel"}}})J" +
         extra_steps + "]}";
}

// `text` with its first `from` replaced by `to` (which must be there).
std::string with(std::string text, const std::string& from, const std::string& to) {
  const std::size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

std::vector<std::string> lines(const IterationRecord& it, Phase phase) {
  std::vector<std::string> out;
  for (const CollectiveRecord& c : it.collectives)
    if (c.phase == phase) out.push_back(c.op + " " + std::to_string(c.bytes) + " " + c.reason);
  return out;
}

}  // namespace

// Megatron-style sequence parallelism on a block: the residual stream stays Shard(1); each of
// attention and feed-forward all-gathers its input and reduce-scatters its output in forward, and
// the reverse in backward, with one reduce-scatter for the three Partial input gradients of wq, wk
// and wv (summed as a DTensor before PrepareModuleInput's redistribute goes back), not three
// all-reduces.
TEST(SequenceParallel, EachSublayerGathersItsInputAndScattersItsOutput) {
  const PlanResult result = run_plan(kSmallLlama, torchtitan_tp_plan(4, true));
  const IterationRecord& it = iteration(result, 1);
  const std::int64_t full = 2 * 8 * 64 * 4;  // [batch, seq, hidden] float32, gathered
  const std::int64_t shard = full / 4;
  std::map<std::string, int> forward, backward;
  for (const CollectiveRecord& c : it.collectives) {
    if (c.reason.find("layers.0.") == std::string::npos) continue;
    if (c.phase == Phase::forward) forward[c.op]++;
    if (c.phase == Phase::backward) backward[c.op]++;
    if (c.op == "c10d_functional.all_gather_into_tensor") {
      EXPECT_EQ(c.input_bytes, shard) << c.reason;
      EXPECT_EQ(c.output_bytes, full) << c.reason;
    }
    if (c.op == "c10d_functional.reduce_scatter_tensor") {
      EXPECT_EQ(c.input_bytes, full) << c.reason;
    }
  }
  EXPECT_EQ(forward, (std::map<std::string, int>{{"c10d_functional.all_gather_into_tensor", 2},
                                                 {"c10d_functional.reduce_scatter_tensor", 2}}));
  EXPECT_EQ(backward, (std::map<std::string, int>{{"c10d_functional.all_gather_into_tensor", 2},
                                                  {"c10d_functional.reduce_scatter_tensor", 2}}))
      << describe(it);
}

// A SequenceParallel norm's weight is a Replicate DTensor applied to a Shard(1) input: its
// gradient is Partial and stays so in .grad. Without FSDP the optimizer's first op on it
// all-reduces it (phase optimizer), one per norm in parameter order; with FSDP2 the group's
// post-backward does, before its reduce-scatter.
TEST(SequenceParallel, NormGradientsArePartialAndReducedWhereTorchReducesThem) {
  const PlanResult plain = run_plan(kSmallLlama, torchtitan_tp_plan(2, true));
  EXPECT_EQ(lines(iteration(plain, 1), Phase::optimizer),
            (std::vector<std::string>{
                "c10d_functional.all_reduce 256 tp layers.0.attention_norm.weight Partial grad -> Replicate",
                "c10d_functional.all_reduce 256 tp layers.0.ffn_norm.weight Partial grad -> Replicate",
                "c10d_functional.all_reduce 256 tp layers.1.attention_norm.weight Partial grad -> Replicate",
                "c10d_functional.all_reduce 256 tp layers.1.ffn_norm.weight Partial grad -> Replicate",
                "c10d_functional.all_reduce 256 tp norm.weight Partial grad -> Replicate"}));

  std::string fsdp = torchtitan_tp_plan(2, true, R"J(,
      {"torch.distributed.fsdp.fully_shard": {"module": "layers.*", "mesh_dim": "dp"}},
      {"torch.distributed.fsdp.fully_shard": {"module": "", "mesh_dim": "dp"}})J");
  fsdp = with(fsdp, R"J("shape": [2], "dim_names": ["tp"])J", R"J("shape": [2, 2], "dim_names": ["dp", "tp"])J");
  fsdp = with(fsdp, R"J("world_size": 2)J", R"J("world_size": 4)J");
  const PlanResult sharded = run_plan(kSmallLlama, fsdp);
  const IterationRecord& it = iteration(sharded, 1);
  EXPECT_TRUE(lines(it, Phase::optimizer).empty());
  // In backward: each block's two norm all-reduces come right before the block's reduce-scatter.
  std::vector<std::string> order;
  for (const CollectiveRecord& c : it.collectives)
    if (c.phase == Phase::backward &&
        (c.reason.find("Partial grad") != std::string::npos || c.reason.find("post-backward") != std::string::npos))
      order.push_back(c.reason);
  EXPECT_EQ(order, (std::vector<std::string>{
                       "tp layers.1.attention_norm.weight Partial grad -> Replicate",
                       "tp layers.1.ffn_norm.weight Partial grad -> Replicate", "fsdp2 group layers.1 (post-backward)",
                       "tp layers.0.attention_norm.weight Partial grad -> Replicate",
                       "tp layers.0.ffn_norm.weight Partial grad -> Replicate", "fsdp2 group layers.0 (post-backward)",
                       "tp norm.weight Partial grad -> Replicate", "fsdp2 group Transformer (post-backward)"}));
}

// loss_parallel: the output stays a Shard(-1) DTensor and the cross entropy all-reduces three
// float32 statistics per token (max, sum of exponentials, target logit) instead of gathering the
// logits; without it the logits are all-gathered to Replicate.
TEST(SequenceParallel, LossParallelReducesStatisticsInsteadOfGatheringLogits) {
  const std::int64_t tokens = 2 * 8;
  const PlanResult parallel = run_plan(kSmallLlama, torchtitan_tp_plan(4, true));
  int statistics = 0, logits_gathers = 0;
  for (const CollectiveRecord& c : iteration(parallel, 1).collectives) {
    if (c.reason.starts_with("loss_parallel")) {
      ++statistics;
      EXPECT_EQ(c.bytes, tokens * 4);
      EXPECT_EQ(c.dtype, DType::float32);
      EXPECT_EQ(c.phase, Phase::forward);
    }
    logits_gathers += c.reason.find("tp output output") != std::string::npos;
  }
  EXPECT_EQ(statistics, 3);
  EXPECT_EQ(logits_gathers, 0);

  const PlanResult gathered = run_plan(kSmallLlama, torchtitan_tp_plan(4, false));
  std::vector<std::int64_t> gathers;
  for (const CollectiveRecord& c : iteration(gathered, 1).collectives) {
    EXPECT_FALSE(c.reason.starts_with("loss_parallel"));
    if (c.reason.find("tp output output") != std::string::npos) gathers.push_back(c.output_bytes);
  }
  EXPECT_EQ(gathers, (std::vector<std::int64_t>{tokens * 96 * 4}));  // [tokens, vocab] float32
}

// use_local_output=False on a Colwise layer hands a Shard(-1) DTensor to the Rowwise layer after
// it, which already wants Shard(-1): nothing is redistributed either way, so the MLP issues what it
// issues with local tensors.
TEST(SequenceParallel, ADTensorOutputIssuesWhatTheLocalOutputDoes) {
  auto plan = [](const char* local) {
    return std::string(R"J({"world_size": 2, "mesh": {"shape": [2], "dim_names": ["tp"]}, "batch_size": 2,
      "iterations": 1, "input_requires_grad": true,
      "steps": [{"parallelize_module": {"module": "", "mesh_dim": "tp", "plan": {
        "net1": {"style": "ColwiseParallel", "use_local_output": )J") +
           local + R"J(}, "net2": "RowwiseParallel"}}}]})J";
  };
  const PlanResult local = run_plan("zoo:MLPModule", plan("true"));
  const PlanResult dtensor = run_plan("zoo:MLPModule", plan("false"));
  EXPECT_EQ(describe(iteration(dtensor, 1)), describe(iteration(local, 1)));
  EXPECT_EQ(iteration(local, 1).collectives.size(), 2u);  // net2's output AR, net1's input-grad AR
}

// PrepareModuleOutput redistributes a module's output: Shard(1) -> Replicate all-gathers it in
// forward and, going back, takes the Replicate gradient's local chunk (no collective).
TEST(SequenceParallel, PrepareModuleOutputGathersTheSequence) {
  std::string text = torchtitan_tp_plan(2, false, R"J(,
      {"parallelize_module": {"module": "layers", "mesh_dim": "tp", "plan": {
        "1": {"style": "PrepareModuleOutput", "output_layouts": "Shard(1)", "desired_output_layouts": "Replicate()"}}}})J");
  // The last block hands a gathered sequence to a plain norm and a Replicate-input output layer.
  text = with(text, R"J("norm": "SequenceParallel",)J", "");
  text = with(text, R"J("output": {"style": "ColwiseParallel", "input_layouts": "Shard(1)",)J",
              R"J("output": {"style": "ColwiseParallel",)J");
  const PlanResult result = run_plan(kSmallLlama, text);
  std::vector<std::string> seen;
  for (const CollectiveRecord& c : iteration(result, 1).collectives)
    if (c.reason.find("tp layers.1 ") != std::string::npos)
      seen.push_back(std::string(phase_name(c.phase)) + " " + c.op);
  EXPECT_EQ(seen, (std::vector<std::string>{"forward c10d_functional.all_gather_into_tensor"}));
}

// Module patterns in FSDP2 and checkpoint steps, as torchtitan loops over model.layers.
TEST(SequenceParallel, FullyShardAndCheckpointTakeModulePatterns) {
  const PlanResult result = run_plan(kSmallLlama, R"J({"world_size": 2, "iterations": 1, "torch_version": "2.15",
    "steps": [{"checkpoint": {"module": "layers.*"}},
              {"torch.distributed.fsdp.fully_shard": {"module": "layers.*"}},
              {"torch.distributed.fsdp.fully_shard": {"module": ""}}]})J");
  ASSERT_EQ(result.fsdp2.size(), 3u);
  EXPECT_EQ(result.fsdp2[0].module, "layers.0");
  EXPECT_EQ(result.fsdp2[1].module, "layers.1");
  EXPECT_NE(plan_error([] {
              run_plan(kSmallLlama, R"J({"world_size": 2, "torch_version": "2.15",
                "steps": [{"torch.distributed.fsdp.fully_shard": {"module": "blocks.*"}}]})J");
            }).find(R"J(module pattern "blocks.*" matches no submodule of Transformer)J"),
            std::string::npos);
}

// Plans PyTorch refuses fail in its words; what stratsim does not model says so.
TEST(SequenceParallel, RefusesWhatPyTorchRefuses) {
  // A SequenceParallel norm's DTensor output into a Linear that is a plain tensor.
  EXPECT_NE(plan_error([] {
              run_plan(kSmallLlama, R"J({"world_size": 2, "mesh": {"shape": [2], "dim_names": ["tp"]}, "iterations": 1,
                "steps": [{"parallelize_module": {"mesh_dim": "tp", "plan": {"norm": "SequenceParallel"}}}]})J");
            })
                .find("output: Linear got mixed torch.Tensor and DTensor, need to convert all torch.Tensor to DTensor "
                      "before calling distributed operators!"),
            std::string::npos);
  // Sharded logits into a cross entropy outside loss_parallel().
  std::string no_loss_parallel = torchtitan_tp_plan(2, true);
  no_loss_parallel = with(no_loss_parallel, R"J("loss_parallel": true)J", R"J("loss_parallel": false)J");
  EXPECT_NE(plan_error([&] {
              run_plan(kSmallLlama, no_loss_parallel);
            }).find("loss: aten.nll_loss_forward.default got mixed torch.Tensor and DTensor"),
            std::string::npos);
  // loss_parallel on Replicate logits.
  std::string replicated = torchtitan_tp_plan(2, false);
  replicated = with(replicated, R"J("output_layouts": "Replicate()"})J",
                    R"J("output_layouts": "Replicate()", "use_local_output": false})J");
  replicated = with(replicated, R"J("loss_parallel": false)J", R"J("loss_parallel": true)J");
  EXPECT_NE(plan_error([&] { run_plan(kSmallLlama, replicated); })
                .find("loss_parallel() requires exactly one mesh dim to shard tensor dimension 1, but got placements "
                      "(Replicate(),) with 0 such mesh dim(s)."),
            std::string::npos);
  // SequenceParallel on a Linear, and two styles on one module.
  EXPECT_NE(plan_error([] {
              run_plan(kSmallLlama, R"J({"world_size": 2, "steps": [{"parallelize_module": {"mesh_dim": "world",
                "plan": {"output": "SequenceParallel"}}}]})J");
            }).find("SequenceParallel is modelled on norms, dropout and element-wise modules"),
            std::string::npos);
  EXPECT_NE(plan_error([] {
              run_plan(kSmallLlama, R"J({"world_size": 2, "steps": [{"parallelize_module": {"mesh_dim": "world",
                "plan": {"output": "ColwiseParallel", "outp*": "RowwiseParallel"}}}]})J");
            }).find(R"J("output" is matched by two plan entries)J"),
            std::string::npos);
}

TEST(SequenceParallel, PrepareStylesNeedMatchingLayouts) {
  auto error = [](const std::string& style) {
    try {
      plan_from_json(R"J({"world_size": 2, "steps": [{"parallelize_module": {"mesh_dim": "world",
        "plan": {"layers.0.attention": )J" +
                     style + "}}}]}");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error(R"J({"style": "PrepareModuleInput", "input_layouts": ["Shard(1)"]})J")
                .find("input_layouts and desired_input_layouts should have same length!"),
            std::string::npos);
  EXPECT_NE(error(R"J({"style": "PrepareModuleInput", "input_layouts": ["Shard(1)", "Replicate()"],
                      "desired_input_layouts": ["Replicate()", null]})J")
                .find("input_layouts[1]: only a module's first positional tensor is modelled"),
            std::string::npos);
  EXPECT_NE(error(R"J("PrepareModuleOutput")J").find("need their layouts"), std::string::npos);
  EXPECT_NE(error(R"J({"style": "SequenceParallel", "input_layouts": "Shard(1)"})J").find("input_layouts"),
            std::string::npos);
}

namespace {

// The second block's collectives in backward and its recomputation, in issue order.
std::vector<std::string> second_block_backward(const PlanResult& result) {
  std::vector<std::string> block;
  for (const CollectiveRecord& c : iteration(result, 1).collectives)
    if ((c.phase == Phase::backward || c.phase == Phase::recompute) && c.reason.find("layers.1.") != std::string::npos)
      block.push_back(std::string(phase_name(c.phase)) + " " + c.reason);
  return block;
}

}  // namespace

// Full activation checkpointing over sequence parallelism, as PyTorch 2.15 runs it (recorded in
// tools/tests/test_stratsim_export.py): the recomputation starts when backward first unpacks a
// saved tensor -- after w2's output redistribution has sent its gradient back (an all-gather that
// saves nothing) -- and stops at the block's last saved tensor, so w2's output is not
// reduce-scattered again.
TEST(SequenceParallel, CheckpointedBlocksRecomputeLazilyAndStopEarly) {
  const PlanResult result =
      run_plan(kSmallLlama, torchtitan_tp_plan(2, true, R"J(, {"checkpoint": {"module": "layers.*"}})J"));
  EXPECT_EQ(second_block_backward(result),
            (std::vector<std::string>{"backward tp layers.1.feed_forward.w2 grad_output Shard(1)->Replicate()",
                                      "recompute tp layers.1.attention input Shard(1)->Replicate()",
                                      "recompute tp layers.1.attention.wo output Partial()->Shard(1)",
                                      "recompute tp layers.1.feed_forward input Shard(1)->Replicate()",
                                      "backward tp layers.1.feed_forward redistribute grad Partial()->Shard(1)",
                                      "backward tp layers.1.attention.wo grad_output Shard(1)->Replicate()",
                                      "backward tp layers.1.attention redistribute grad Partial()->Shard(1)"}));
}

// checkpoint(use_reentrant=True) makes the block one autograd Function: its backward replays the
// whole forward -- w2's output reduce-scatter too, past the last saved tensor -- before any of the
// block's own backward, w2's gradient all-gather included.
TEST(SequenceParallel, ReentrantCheckpointReplaysTheWholeBlockFirst) {
  const PlanResult result = run_plan(
      kSmallLlama, torchtitan_tp_plan(2, true, R"J(, {"checkpoint": {"module": "layers.*", "use_reentrant": true}})J"));
  EXPECT_EQ(second_block_backward(result),
            (std::vector<std::string>{"recompute tp layers.1.attention input Shard(1)->Replicate()",
                                      "recompute tp layers.1.attention.wo output Partial()->Shard(1)",
                                      "recompute tp layers.1.feed_forward input Shard(1)->Replicate()",
                                      "recompute tp layers.1.feed_forward.w2 output Partial()->Shard(1)",
                                      "backward tp layers.1.feed_forward.w2 grad_output Shard(1)->Replicate()",
                                      "backward tp layers.1.feed_forward redistribute grad Partial()->Shard(1)",
                                      "backward tp layers.1.attention.wo grad_output Shard(1)->Replicate()",
                                      "backward tp layers.1.attention redistribute grad Partial()->Shard(1)"}));
  // What PyTorch refuses, in its words.
  auto refused = [](const std::string& checkpoint) {
    try {
      plan_from_json(torchtitan_tp_plan(2, true, ", " + checkpoint));
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(refused(R"J({"checkpoint": {"module": "layers.*", "policy": "selective_op", "use_reentrant": true}})J")
                .find("use_reentrant: Passing context_fn is only supported when use_reentrant=False."),
            std::string::npos);
  EXPECT_NE(refused(R"J({"checkpoint": {"module": "layers.*", "api": "composable", "use_reentrant": true}})J")
                .find("use_reentrant=True is not supported in composable checkpoint."),
            std::string::npos);
  EXPECT_NE(refused(R"J({"checkpoint": {"module": "layers.*", "use_reentrant": "yes"}})J").find("use_reentrant"),
            std::string::npos);
}

// Composable checkpoint() on a module whose style was applied first hooks in after the style's
// pre-hook and before its forward hook: the region starts from the gathered input, so the
// recomputation gathers nothing (checkpoint_wrapper's region holds the hooks: it gathers again).
// Recorded from PyTorch 2.15 by tools/tests/test_stratsim_export.py.
TEST(SequenceParallel, ComposableCheckpointAfterAStyleRecomputesInsideItsHooks) {
  auto recomputed = [&](const std::string& api) {
    const PlanResult result =
        run_plan(kSmallLlama,
                 torchtitan_tp_plan(2, true, R"J(, {"checkpoint": {"module": "layers.0.feed_forward")J" + api + "}}"));
    return lines(iteration(result, 1), Phase::recompute);
  };
  EXPECT_EQ(recomputed(""),
            (std::vector<std::string>{"c10d_functional.all_gather_into_tensor 4096 tp layers.0.feed_forward input "
                                      "Shard(1)->Replicate()"}));
  EXPECT_EQ(recomputed(R"J(, "api": "checkpoint_wrapper")J"), recomputed(""));
  EXPECT_TRUE(recomputed(R"J(, "api": "composable")J").empty());
  // A plain input from PrepareModuleInput(use_local_output=True) would be wrapped again: refused.
  const std::string local_input = with(
      torchtitan_tp_plan(2, true, R"J(, {"checkpoint": {"module": "layers.0.feed_forward", "api": "composable"}})J"),
      R"J("desired_input_layouts": ["Replicate()"]})J",
      R"J("desired_input_layouts": ["Replicate()"], "use_local_output": true})J");
  EXPECT_NE(plan_error([&] { run_plan(kSmallLlama, local_input); })
                .find("composable checkpoint() on \"layers.0.feed_forward\" after "
                      "PrepareModuleInput(use_local_output=True)"),
            std::string::npos);
  try {
    plan_from_json(torchtitan_tp_plan(2, true, R"J(, {"checkpoint": {"module": "layers.0", "api": "wrap"}})J"));
    ADD_FAILURE() << "an unknown api was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("api: unknown api \"wrap\" (expected checkpoint_wrapper or composable)"),
              std::string::npos)
        << e.what();
  }
}

// Layouts out of the activation's range are a PlanError, never an out-of-range access.
TEST(SequenceParallel, OutOfRangeLayoutsAreRefused) {
  const std::string plan = with(torchtitan_tp_plan(2, true), R"J("*.attention_norm": "SequenceParallel")J",
                                R"J("*.attention_norm": {"style": "SequenceParallel", "sequence_dim": 7})J");
  EXPECT_NE(plan_error([&] { run_plan(kSmallLlama, plan); })
                .find("sequence_dim Shard(7) is out of range for a 3-D "
                      "activation"),
            std::string::npos);
  const std::string desired = with(torchtitan_tp_plan(2, true), R"J("desired_input_layouts": ["Replicate()", null])J",
                                   R"J("desired_input_layouts": ["Shard(9)", null])J");
  EXPECT_NE(plan_error([&] { run_plan(kSmallLlama, desired); }).find("desired_input_layouts Shard(9) is out of range"),
            std::string::npos);
}

// A Rowwise layer declared Replicate and fed a Replicate DTensor chunks it locally (no collective)
// and, in backward, all-gathers its Shard(-1) input gradient back to Replicate before handing it on
// (attention's four projections Rowwise from PrepareModuleInput's Replicate: checked against
// PyTorch 2.15); fed a DTensor placed otherwise than it declares, it is refused, as PyTorch leaves
// that case to DTensor's operator dispatch.
TEST(SequenceParallel, StylesFedADTensorRedistributeFromItsPlacement) {
  std::string rowwise = torchtitan_tp_plan(2, true);
  for (const char* name : {"wq", "wk", "wv"})
    rowwise = with(rowwise, std::string(R"J("*.attention.)J") + name + R"J(": "ColwiseParallel")J",
                   std::string(R"J("*.attention.)J") + name +
                       R"J(": {"style": "RowwiseParallel", "input_layouts": "Replicate()"})J");
  rowwise = with(rowwise, R"J("*.attention.wo": {"style": "RowwiseParallel", "output_layouts": "Shard(1)"})J",
                 R"J("*.attention.wo": {"style": "RowwiseParallel", "input_layouts": "Replicate()",
                                        "output_layouts": "Shard(1)"})J");
  const PlanResult result = run_plan(kSmallLlama, rowwise);
  std::vector<std::string> wq;
  for (const CollectiveRecord& c : iteration(result, 1).collectives)
    if (c.reason.find("layers.0.attention.wq") != std::string::npos)
      wq.push_back(std::string(phase_name(c.phase)) + " " + c.reason);
  EXPECT_EQ(wq, (std::vector<std::string>{"forward tp layers.0.attention.wq output Partial()->Replicate()",
                                          "backward tp layers.0.attention.wq grad_input Shard(2)->Replicate()"}));
  const std::string undeclared = with(torchtitan_tp_plan(2, true), R"J("*.attention.wq": "ColwiseParallel")J",
                                      R"J("*.attention.wq": "RowwiseParallel")J");
  EXPECT_NE(plan_error([&] { run_plan(kSmallLlama, undeclared); })
                .find("receives a DTensor placed Replicate() while its input_layouts (Shard(2)) equal the layout "
                      "RowwiseParallel computes on"),
            std::string::npos);
}
