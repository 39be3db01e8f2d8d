// Tensor parallelism on a LLaMA-style block: per-style collectives with sizes taken from each
// layer's own input, even where several layers read the same input (wq, wk, wv; w1, w3).
#include <gtest/gtest.h>

#include "stratsim/core/json_reader.hpp"
#include "stratsim/core/model_io.hpp"
#include "stratsim/core/planner.hpp"

using namespace stratsim::core;

TEST(TensorParallel, LlamaBlockCollectiveSizes) {
  const Model model = load_model("zoo:gpt:layers=1,hidden=64,heads=4,ffn=128,vocab=100,seq=8");
  const auto doc = parse_document(R"({"world_size": 2, "mesh": {"shape": [2], "dim_names": ["tp"]}, "batch_size": 1,
    "iterations": 1,
    "steps": [{"parallelize_module": {"module": "layers.0", "mesh_dim": "tp", "plan": {
      "attention.wq": "colwise", "attention.wk": "colwise", "attention.wv": "colwise", "attention.wo": "rowwise",
      "feed_forward.w1": "colwise", "feed_forward.w3": "colwise", "feed_forward.w2": "rowwise"}}}]})",
                                  "tp.json", false);
  const Plan plan = parse_plan(JsonReader(doc, "tp.json"));
  const PlanResult result = plan_training(model, plan);
  const std::int64_t activation = 1 * 8 * 64 * 4;  // [batch, seq, hidden] fp32
  int forward = 0, backward = 0;
  for (const CollectiveRecord& c : result.iterations.back().collectives) {
    EXPECT_EQ(c.op, "c10d_functional.all_reduce") << c.reason;
    EXPECT_EQ(c.bytes, activation) << c.reason;
    (c.phase == Phase::forward ? forward : backward)++;
  }
  EXPECT_EQ(forward, 2);   // wo and w2 outputs (Partial -> Replicate)
  EXPECT_EQ(backward, 5);  // grad_input of wq, wk, wv, w1, w3 (Partial -> Replicate)
  // Attention runs on the local half of the heads: 4 * b * s^2 * (heads * head_dim / tp) * causal 1/2.
  for (const ProgramOp& op : result.program.ops)
    if (op.name == "layers.0.attention.sdpa.forward") {
      EXPECT_DOUBLE_EQ(op.flops, 4.0 * 1 * 8 * 8 * 32 * 0.5);
    }
}

// Uneven sharding pads to tp * ceil(n / tp), as DTensor does (placement_types.py: Shard's
// _reduce_shard_tensor splits the Partial input with padding and concatenates it before
// reduce_scatter_tensor; _to_replicate_tensor pads the local shard before all_gather_tensor).
// TestModel's mlp.net2 = Linear(16, 10), RowwiseParallel with output_layouts=Shard(1) on tp = 4,
// batch 2, fp32: the Partial output [2, 10] is padded to [2, 12] (96 B) and reduce-scattered into
// [2, 3] shards (24 B); in backward the [2, 3] grad shard is all-gathered into [2, 12] (96 B).
TEST(TensorParallel, UnevenReduceScatterAndAllGatherArePaddedLikeDTensor) {
  const Model model = load_model("zoo:TestModel");
  const auto doc = parse_document(R"J({"world_size": 4, "mesh": {"shape": [4], "dim_names": ["tp"]}, "batch_size": 2,
    "iterations": 1,
    "steps": [{"parallelize_module": {"module": "mlp", "mesh_dim": "tp", "plan": {
      "net1": "colwise", "net2": {"style": "rowwise", "output_layouts": "Shard(1)"}}}}]})J",
                                  "tp.json", false);
  const PlanResult result = plan_training(model, parse_plan(JsonReader(doc, "tp.json")));
  std::vector<std::string> seen;
  for (const CollectiveRecord& c : result.iterations.back().collectives) {
    if (c.reason.find("mlp.net2") == std::string::npos) continue;
    seen.push_back(std::string(phase_name(c.phase)) + " " + c.op + " " + std::to_string(c.bytes));
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"forward c10d_functional.reduce_scatter_tensor 96",
                                            "backward c10d_functional.all_gather_into_tensor 96"}));
  for (const ProgramOp& op : result.program.ops) {
    if (op.type != OpType::collective || op.role != OpRole::tp_output) continue;
    EXPECT_EQ(op.input_bytes, 96) << op.name;
    EXPECT_EQ(op.output_bytes, 24) << op.name;
  }
}

// DTensor's Shard(i) -> Shard(j): one all-to-all from PyTorch 2.4 (the custom op
// _dtensor.shard_dim_alltoall, PR #124872, which CommDebugMode counts under that name); in 2.3 an
// all-gather of the shard (all_gather_tensor) and a local chunk along the new dim. net1's Colwise
// output Shard(1) -> Shard(0) and net2's Rowwise input Shard(0) -> Shard(1) each move once per
// direction: SimpleModel, batch 4, net1 = Linear(5, 8) on tp = 2, fp32: the [4, 4] shard is 64 B.
TEST(TensorParallel, ShardToShardIsOneAllToAllFrom24AndAnAllGatherBefore) {
  const Model model = load_model("zoo:SimpleModel");
  for (const char* version : {"2.4", "2.3"}) {
    SCOPED_TRACE(version);
    const auto doc = parse_document(std::string(R"J({"world_size": 2, "mesh": {"shape": [2], "dim_names": ["tp"]},
      "batch_size": 4, "iterations": 1, "torch_version": ")J") +
                                        version + R"J(",
      "steps": [{"parallelize_module": {"module": "", "mesh_dim": "tp", "plan": {
        "net1": {"style": "colwise", "output_layouts": "Shard(0)"},
        "net2": {"style": "rowwise", "input_layouts": "Shard(0)"}}}}]})J",
                                    "tp.json", false);
    const PlanResult result = plan_training(model, parse_plan(JsonReader(doc, "tp.json")));
    const bool alltoall = std::string(version) == "2.4";
    int moves = 0;
    for (const ProgramOp& op : result.program.ops) {
      if (op.type != OpType::collective || !op.from.is_shard() || !op.to.is_shard()) continue;
      ++moves;
      EXPECT_EQ(op.comm_key, alltoall ? "_dtensor.shard_dim_alltoall" : "c10d_functional.all_gather_into_tensor")
          << op.name;
      EXPECT_EQ(op.kind, alltoall ? CollectiveKind::all_to_all : CollectiveKind::all_gather) << op.name;
      EXPECT_EQ(op.input_bytes, 4 * 4 * 4) << op.name;
      EXPECT_EQ(op.output_bytes, alltoall ? 4 * 4 * 4 : 2 * 4 * 4 * 4) << op.name;
    }
    EXPECT_EQ(moves, 4);  // net1's output and its gradient, net2's input and its gradient
  }
}

// FSDP1 over tensor parallelism: a unit's reduce-scatter waits for autograd to come back to its
// views' split node, so the Colwise layer's input-gradient all-reduce inside the unit comes first
// (the issue's third ordering rule; recorded FSDP1 cases pin the other two).
TEST(TensorParallel, Fsdp1ReducesAUnitAfterItsTensorParallelInputGradient) {
  const Model model = load_model("zoo:MLPModule");
  const auto doc = parse_document(R"J({"world_size": 4, "mesh": {"shape": [2, 2], "dim_names": ["dp", "tp"]},
    "batch_size": 2, "iterations": 1, "input_requires_grad": true,
    "steps": [{"parallelize_module": {"mesh_dim": "tp", "plan": {"net1": "colwise", "net2": "rowwise"}}},
              {"fully_shard": {"module": "", "mesh_dim": "dp", "use_orig_params": true}}]})J",
                                  "tp.json", false);
  const PlanResult result = plan_training(model, parse_plan(JsonReader(doc, "tp.json")));
  std::vector<std::string> backward;
  for (const CollectiveRecord& c : result.iterations.back().collectives)
    if (c.phase == Phase::backward) backward.push_back(c.op + " " + c.group);
  EXPECT_EQ(backward, (std::vector<std::string>{"c10d_functional.all_reduce tp", "c10d._reduce_scatter_base_ dp"}));
}
