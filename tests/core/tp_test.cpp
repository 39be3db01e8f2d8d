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
