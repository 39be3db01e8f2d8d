// FSDP2 (torch.distributed.fsdp.fully_shard): the rules that differ between PyTorch releases, which
// the golden vectors (recorded with one release) cannot show, and the plan errors. The golden
// vectors (golden_vectors_test.cpp) check the common behaviour against PyTorch 2.15 itself.
#include <gtest/gtest.h>

#include "planner_test_support.hpp"

using namespace stratsim::core;
using namespace stratsim::test;

namespace {

// Sequential(Linear(10,10), ReLU, Linear(10,10)): 220 float32 parameters.
Model seq_model() {
  return model_from_json({{"name", "Sequential"},
                          {"modules",
                           {{{"name", "0"}, {"type", "Linear"}, {"in_features", 10}, {"out_features", 10}},
                            {{"name", "1"}, {"type", "ReLU"}},
                            {{"name", "2"}, {"type", "Linear"}, {"in_features", 10}, {"out_features", 10}}}}});
}

std::string fsdp2_plan(int world, const std::string& version, const std::string& root_args = "",
                       const std::string& mesh = "") {
  return "{\"world_size\":" + std::to_string(world) + ",\"torch_version\":\"" + version + "\",\"iterations\":2" +
         (mesh.empty() ? "" : ",\"mesh\":" + mesh) +
         ",\"steps\":[{\"torch.distributed.fsdp.fully_shard\":{\"module\":\"0\"}},"
         "{\"torch.distributed.fsdp.fully_shard\":{\"module\":\"\"" +
         (root_args.empty() ? "" : "," + root_args) + "}}]}";
}

std::vector<std::string> ops_of(const IterationRecord& it) {
  std::vector<std::string> ops;
  for (const CollectiveRecord& c : it.collectives) ops.push_back(c.op + " " + c.reason);
  return ops;
}

}  // namespace

// PR #160135 (2.9) copies instead of all-gathering on a one-rank shard group; PR #162021 (2.10)
// copies instead of reduce-scattering.
TEST(Fsdp2, OneRankShardGroupGathersUntil29AndScattersUntil210) {
  auto ops = [&](const std::string& version) {
    return ops_of(iteration(run_plan(seq_model(), fsdp2_plan(1, version)), 2));
  };
  EXPECT_EQ(ops("2.8").size(), 5u);  // two gathers in forward, one backward re-gather (unit 0), two scatters
  // Neither group's input needs a gradient: the root's final callback reduces both, in pre-order.
  EXPECT_EQ(ops("2.9"), (std::vector<std::string>{"c10d._reduce_scatter_base_ fsdp2 group Sequential (post-backward)",
                                                  "c10d._reduce_scatter_base_ fsdp2 group 0 (post-backward)"}));
  EXPECT_TRUE(ops("2.10").empty());
  // HSDP with a one-rank shard dim still all-reduces over the replicate dim.
  const PlanResult hsdp = run_plan(seq_model(),
                                   "{\"world_size\":2,\"torch_version\":\"2.10\",\"iterations\":1,"
                                   "\"mesh\":{\"shape\":[2,1],\"dim_names\":[\"rep\",\"shard\"]},"
                                   "\"steps\":[{\"torch.distributed.fsdp.fully_shard\":{\"module\":\"\","
                                   "\"mesh_dim\":[\"rep\",\"shard\"]}}]}");
  ASSERT_EQ(iteration(hsdp, 1).collectives.size(), 1u);
  EXPECT_EQ(iteration(hsdp, 1).collectives[0].op, "c10d.allreduce_");
  EXPECT_EQ(iteration(hsdp, 1).collectives[0].group, "rep");
  EXPECT_EQ(iteration(hsdp, 1).collectives[0].bytes, 220 * 4);
}

// Before 2.8 the root never resharded after forward; from 2.8 an explicit reshard_after_forward=True
// is honoured on the root too (PRs #154704, #155319).
TEST(Fsdp2, TheRootReshardsAfterForwardOnlyWhenToldFrom28) {
  auto backward_gathers = [&](const std::string& version, const std::string& args) {
    int n = 0;
    const PlanResult r = run_plan(seq_model(), fsdp2_plan(2, version, args));
    for (const CollectiveRecord& c : iteration(r, 2).collectives)
      n += c.op == "c10d._allgather_base_" && c.phase == Phase::backward;
    return n;
  };
  EXPECT_EQ(backward_gathers("2.7", "\"reshard_after_forward\":true"), 1);  // unit 0 only
  EXPECT_EQ(backward_gathers("2.8", "\"reshard_after_forward\":true"), 2);
  EXPECT_EQ(backward_gathers("2.8", ""), 1);
  EXPECT_EQ(backward_gathers("2.15", "\"reshard_after_forward\":2"), 2);  // the shard group's size: True
  EXPECT_EQ(backward_gathers("2.15", "\"reshard_after_forward\":1"), 1);  // 1: False
}

// Without reduce_dtype, gradients were reduced in param_dtype; 2.15 reduces them in the
// parameters' own dtype (PR #197203).
TEST(Fsdp2, ReduceDtypeDefaultFollowsTheRelease) {
  auto reduce = [&](const std::string& version, const std::string& mp) {
    const PlanResult r = run_plan(seq_model(), fsdp2_plan(2, version, "\"mp_policy\":" + mp));
    for (const CollectiveRecord& c : iteration(r, 2).collectives)
      if (c.op == "c10d._reduce_scatter_base_" && c.module.empty())
        return std::string(dtype_name(c.dtype)) + " " + std::to_string(c.bytes);
    return std::string("none");
  };
  // The root group holds Linear "2": 110 elements, 55 per rank.
  EXPECT_EQ(reduce("2.14", "{\"param_dtype\":\"bfloat16\"}"), "bfloat16 220");
  EXPECT_EQ(reduce("2.15", "{\"param_dtype\":\"bfloat16\"}"), "float32 440");
  EXPECT_EQ(reduce("2.14", "{\"param_dtype\":\"bfloat16\",\"reduce_dtype\":\"float32\"}"), "float32 440");
}

// Each parameter is its own Shard(0) DTensor: dim 0 padded to the group, the all-gather input the
// padded shards back to back, what the rank stores their sum.
TEST(Fsdp2, EveryParameterIsPaddedOnDimZero) {
  const Model model = model_from_json(
      {{"name", "M"}, {"modules", {{{"name", "a"}, {"type", "Linear"}, {"in_features", 5}, {"out_features", 7}}}}});
  const PlanResult r = run_plan(model,
                                "{\"world_size\":3,\"torch_version\":\"2.15\",\"iterations\":1,"
                                "\"steps\":[{\"torch.distributed.fsdp.fully_shard\":{\"module\":\"\"}}]}");
  ASSERT_EQ(r.fsdp2.size(), 1u);
  // weight 7x5: 3 rows of 5 per rank; bias 7: 3 per rank.
  EXPECT_EQ(r.fsdp2[0].shard_numels, (std::vector<std::int64_t>{15, 3}));
  EXPECT_EQ(r.fsdp2[0].unsharded_numel, 54);
  EXPECT_EQ(r.memory.parameters, 18 * 4);
  const CollectiveRecord& gather = iteration(r, 1).collectives.at(0);
  EXPECT_EQ(gather.input_bytes, 18 * 4);
  EXPECT_EQ(gather.output_bytes, 54 * 4);
  EXPECT_EQ(r.params[0].fsdp2_group, 0);
  EXPECT_EQ(r.params[0].fsdp_unit, -1);
}

TEST(Fsdp2, PlanErrorsInPyTorchsWordsOrOurs) {
  const Model model = seq_model();
  auto error = [&](const std::string& plan) { return plan_error([&] { run_plan(model, plan); }); };
  EXPECT_EQ(error(fsdp2_plan(4, "2.15", "\"reshard_after_forward\":3")),
            "plan.json: steps[1] (torch.distributed.fsdp.fully_shard): If passing reshard_after_forward as an int, it "
            "should be a factor of 4, not 3");
  EXPECT_NE(error(fsdp2_plan(4, "2.15", "\"reshard_after_forward\":2")).find("does not model yet"), std::string::npos);
  EXPECT_NE(error("{\"world_size\":2,\"torch_version\":\"2.15\",\"steps\":["
                  "{\"torch.distributed.fsdp.fully_shard\":{\"module\":\"\"}},"
                  "{\"torch.distributed.fsdp.fully_shard\":{\"module\":\"\"}}]}")
                .find("fully_shard has already been applied to the following module: Sequential"),
            std::string::npos);
  EXPECT_NE(error("{\"world_size\":2,\"steps\":[{\"fully_shard\":{\"module\":\"0\"}},"
                  "{\"torch.distributed.fsdp.fully_shard\":{\"module\":\"\"}}]}")
                .find("a model uses one or the other"),
            std::string::npos);
  EXPECT_NE(error("{\"world_size\":2,\"steps\":[{\"torch.distributed.fsdp.fully_shard\":{\"module\":\"\"}},"
                  "{\"parallelize_module\":{\"module\":\"\",\"mesh_dim\":\"world\",\"plan\":{\"0\":\"colwise\"}}}]}")
                .find("already managed by fully_shard/replicate"),
            std::string::npos);
}

// From 2.6 the bare name means FSDP2; a plan must say which API it means.
TEST(Fsdp2, BareFullyShardIsAmbiguousFrom26) {
  try {
    plan_from_json("{\"world_size\":2,\"torch_version\":\"2.6\",\"steps\":[{\"fully_shard\":{\"module\":\"\"}}]}");
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("\"torch.distributed.fsdp.fully_shard\" (FSDP2)"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(
      plan_from_json("{\"world_size\":2,\"torch_version\":\"2.6\",\"steps\":["
                     "{\"torch.distributed._composable.fully_shard\":{\"module\":\"\"}}]}"));
  EXPECT_NO_THROW(
      plan_from_json("{\"world_size\":2,\"torch_version\":\"2.5\",\"steps\":[{\"fully_shard\":{\"module\":\"\"}}]}"));
}

// No gradient sync for the first k-1 micro-steps; set_reshard_after_backward(False) in them keeps
// the parameters, so the next forward gathers nothing.
TEST(Fsdp2, AccumulationSkipsReductionsAndOptionallyGathers) {
  auto plan = [](bool keep) {
    return std::string(
               "{\"world_size\":2,\"torch_version\":\"2.15\",\"iterations\":4,\"gradient_accumulation_steps\":2,"
               "\"steps\":[{\"torch.distributed.fsdp.fully_shard\":{\"module\":\"\","
               "\"reshard_after_backward_in_accumulation\":") +
           (keep ? "false" : "true") + "}}]}";
  };
  const PlanResult resharding = run_plan(seq_model(), plan(false));
  const PlanResult keeping = run_plan(seq_model(), plan(true));
  EXPECT_EQ(ops_of(iteration(resharding, 1)),
            (std::vector<std::string>{"c10d._allgather_base_ fsdp2 group Sequential (pre-forward)"}));
  EXPECT_EQ(ops_of(iteration(resharding, 2)).size(), 2u);  // gather, reduce-scatter
  EXPECT_EQ(ops_of(iteration(keeping, 2)),
            (std::vector<std::string>{"c10d._reduce_scatter_base_ fsdp2 group Sequential (post-backward)"}));
}
