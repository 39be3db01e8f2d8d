// FSDP2 (torch.distributed.fsdp.fully_shard): the rules that differ between PyTorch releases, which
// the golden vectors (recorded with one release) cannot show, and the plan errors. The golden
// vectors (golden_vectors_test.cpp) check the common behaviour against PyTorch 2.15 itself.
#include <gtest/gtest.h>

#include <map>

#include "../random_cases.hpp"
#include "planner_test_support.hpp"

using namespace stratsim::core;
using namespace stratsim::test;
using nlohmann::json;

namespace {

// Every rank issues the same (op, group, input, output, dtype) sequence.
void check_same_sequence_on_every_rank(const Model& model, const Plan& plan, const PlanResult& r0) {
  auto sequence = [](const PlanResult& r) {
    std::vector<std::string> out;
    for (const IterationRecord& it : r.iterations)
      for (const CollectiveRecord& c : it.collectives)
        out.push_back(c.op + c.group + std::to_string(c.input_bytes) + "/" + std::to_string(c.output_bytes) +
                      std::string(dtype_name(c.dtype)));
    return out;
  };
  const std::vector<std::string> reference = sequence(r0);
  for (int rank = 1; rank < plan.world_size; ++rank)
    EXPECT_EQ(sequence(plan_training(model, plan, {rank, 0})), reference) << "rank " << rank;
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
  EXPECT_EQ(error(fsdp2_plan(4, "2.15", "\"reshard_after_forward\":0")),
            "plan.json: steps[1] (torch.distributed.fsdp.fully_shard): If passing reshard_after_forward as an int, it "
            "should be a factor of 4, not 0");
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

// Properties over random models and FSDP2 plans (1-D, HSDP, and dp x tp meshes with tensor
// parallelism under FSDP2; roots below the model; accumulation; mixed precision; both sides of
// every version rule): every trainable parameter in exactly one group; each all-gather moves W
// times its input and each reduce-scatter W times its output, both as the group's report says for
// the gathers; the all-reduce follows its reduce-scatter with the same bytes on the replicate dim;
// no reduction on a micro-step that does not sync; every rank issues the same sequence.
TEST(Fsdp2Properties, RandomModelsAndPlans) {
  Random random(20261126);
  int hsdp = 0, tp = 0, cases = 0;
  for (int i = 0; i < 200; ++i) {
    ModelGen gen{random};
    const json model_doc = gen.model();
    const Model model = random_case_model(model_doc);
    const int kind = random.uniform(0, 2);  // 1-D; rep x shard; dp x tp
    const std::vector<std::vector<int>> shapes{{2, 2}, {2, 3}, {3, 2}, {2, 4}};
    json plan = {{"iterations", random.uniform(2, 4)},
                 {"batch_size", random.uniform(1, 3)},
                 {"input_requires_grad", random.chance(0.3)},
                 {"torch_version", random.pick(std::vector<std::string>{"2.6", "2.8", "2.9", "2.10", "2.15"})}};
    if (random.chance(0.3)) plan["gradient_accumulation_steps"] = 2;
    json mesh_dim = nullptr;
    json steps = json::array();
    if (kind == 0) {
      plan["world_size"] = random.pick(std::vector<int>{1, 2, 3, 4, 8});
    } else {
      const std::vector<int> shape = random.pick(shapes);
      plan["world_size"] = shape[0] * shape[1];
      const bool hybrid = kind == 1;
      plan["mesh"] = {{"shape", shape}, {"dim_names", hybrid ? json{"rep", "shard"} : json{"dp", "tp"}}};
      mesh_dim = hybrid ? json{"rep", "shard"} : json("dp");
      hsdp += hybrid;
      if (!hybrid) {
        json entries = json::object();
        for (const Module& m : model.modules)
          if (m.leaf == LeafKind::linear && random.chance(0.5))
            entries[m.fqn] = random.chance(0.5) ? "colwise" : "rowwise";
        if (!entries.empty()) {
          steps.push_back({{"parallelize_module", {{"module", ""}, {"mesh_dim", "tp"}, {"plan", entries}}}});
          ++tp;
        }
      }
    }
    const bool mixed = random.chance(0.3), keep = random.chance(0.5);
    auto call = [&](const std::string& module) {
      json body = {{"module", module}, {"reshard_after_backward_in_accumulation", keep}};
      if (!mesh_dim.is_null()) body["mesh_dim"] = mesh_dim;
      if (random.chance(0.3)) body["reshard_after_forward"] = random.chance(0.5);
      if (mixed) body["mp_policy"] = {{"param_dtype", "bfloat16"}};
      return json{{"torch.distributed.fsdp.fully_shard", body}};
    };
    for (int m : disjoint_subtrees(model, random, random.uniform(0, 3)))
      steps.push_back(call(model.modules[static_cast<std::size_t>(m)].fqn));
    if (random.chance(0.8)) steps.push_back(call(""));
    plan["steps"] = steps;
    SCOPED_TRACE("case " + std::to_string(i) + "\nmodel: " + model_doc.dump() + "\nplan: " + plan.dump());
    const Plan parsed = plan_from_json(plan.dump());
    const PlanResult r0 = plan_training(model, parsed, {0, 0});
    ++cases;

    // One group per trainable parameter, or none (a plan without a root leaves some unmanaged).
    std::map<std::string, int> owners;
    for (const FsdpParamGroupReport& g : r0.fsdp2)
      for (const std::string& p : g.params) ++owners[p];
    for (const auto& [name, count] : owners) EXPECT_EQ(count, 1) << name;
    for (std::size_t g = 0; g < r0.fsdp2.size(); ++g) {
      const FsdpParamGroupReport& group = r0.fsdp2[g];
      std::int64_t sum = 0;
      for (std::int64_t n : group.shard_numels) sum += n;
      EXPECT_EQ(sum, group.shard_numel);
    }
    for (const IterationRecord& it : r0.iterations) {
      int last_scatter_output = -1;
      for (const CollectiveRecord& c : it.collectives) {
        if (c.reason.find("fsdp2") == std::string::npos) continue;
        const int w = group_size_by_name(parsed, c.group);
        if (c.op == "c10d._allgather_base_") {
          EXPECT_EQ(c.output_bytes, w * c.input_bytes) << describe(c);
          bool matches = false;
          for (const FsdpParamGroupReport& g : r0.fsdp2)
            matches = matches || (g.module == c.module && g.shard_numel * dtype_size(c.dtype) == c.input_bytes);
          EXPECT_TRUE(matches) << describe(c);
        } else if (c.op == "c10d._reduce_scatter_base_") {
          EXPECT_EQ(c.input_bytes, w * c.output_bytes) << describe(c);
          EXPECT_TRUE(it.sync) << describe(c);
          last_scatter_output = static_cast<int>(c.output_bytes);
        } else if (c.op == "c10d.allreduce_") {
          EXPECT_TRUE(it.sync) << describe(c);
          if (last_scatter_output >= 0) {
            EXPECT_EQ(c.bytes, last_scatter_output) << describe(c);
          }
        }
      }
    }
    check_same_sequence_on_every_rank(model, parsed, r0);
    if (HasFailure()) break;
  }
  EXPECT_EQ(cases, 200);
  EXPECT_GT(hsdp, 20);
  EXPECT_GT(tp, 20);
}

// reshard_after_forward=k (_get_post_forward_mesh_info): after forward each rank keeps a clone of
// 1/k of the unsharded parameters; the pre-backward all-gather runs over the rows of
// mesh.view(-1, k), i.e. runs of k consecutive shard-group ranks, and moves the same output.
TEST(Fsdp2, ReshardAfterForwardIntGathersOverRunsOfKRanks) {
  const Model model = seq_model();
  const std::string plan_text =
      "{\"world_size\":8,\"torch_version\":\"2.15\",\"iterations\":2,\"steps\":["
      "{\"torch.distributed.fsdp.fully_shard\":{\"module\":\"0\",\"reshard_after_forward\":2}},"
      "{\"torch.distributed.fsdp.fully_shard\":{\"module\":\"\"}}]}";
  const PlanResult r = run_plan(model, plan_text, 5);
  // Linear(10, 10): weight 2 rows x 10 + bias 2 = 22 elements per rank, 176 unsharded.
  std::vector<const CollectiveRecord*> gathers;
  for (const CollectiveRecord& c : iteration(r, 2).collectives)
    if (c.kind == CollectiveKind::all_gather && c.module == "0") gathers.push_back(&c);
  ASSERT_EQ(gathers.size(), 2u);
  EXPECT_EQ(gathers[0]->group, "world");
  EXPECT_EQ(gathers[0]->input_bytes, 22 * 4);
  EXPECT_EQ(gathers[1]->group, "world(2)");
  EXPECT_EQ(gathers[1]->phase, Phase::backward);
  EXPECT_EQ(gathers[1]->input_bytes, 88 * 4);
  EXPECT_EQ(gathers[1]->output_bytes, 176 * 4);
  EXPECT_EQ(r.group_ranks[gathers[1]->group_id], (std::vector<int>{4, 5}));
  // The clone before the unsharded parameters are freed, and its copy-in (no cast) before the gather.
  std::vector<std::string> copies;
  for (const ProgramOp& op : r.program.ops)
    if (op.iteration == 2 && op.role == OpRole::fsdp2_copy && op.module == "0")
      copies.push_back(op.name + " " + std::to_string(op.bytes_accessed));
  EXPECT_EQ(copies,
            (std::vector<std::string>{"fsdp2.all_gather_copy_in 0 176", "fsdp2.all_gather_copy_out 0 1408",
                                      "fsdp2.reshard_to_post_forward 0 704", "fsdp2.all_gather_copy_in 0 704",
                                      "fsdp2.all_gather_copy_out 0 1408", "fsdp2.reduce_scatter_copy_in 0 1408"}));
  ASSERT_EQ(r.fsdp2.size(), 2u);
  EXPECT_EQ(r.fsdp2[0].post_forward_ranks, 2);
  EXPECT_EQ(r.fsdp2[1].post_forward_ranks, 0);
  check_same_sequence_on_every_rank(model, plan_from_json(plan_text), r);

  // Between true and false in memory: four layers keep 1/k through forward instead of nothing or
  // everything (plus, at the peak, one layer gathered whole), so a larger k holds less.
  const Model four =
      model_from_json({{"name", "Sequential"},
                       {"modules",
                        {{{"name", "0"}, {"type", "Linear"}, {"in_features", 16}, {"out_features", 16}},
                         {{"name", "1"}, {"type", "Linear"}, {"in_features", 16}, {"out_features", 16}},
                         {{"name", "2"}, {"type", "Linear"}, {"in_features", 16}, {"out_features", 16}},
                         {{"name", "3"}, {"type", "Linear"}, {"in_features", 16}, {"out_features", 16}}}}});
  auto peak_unsharded = [&](const std::string& reshard) {
    std::string steps;
    for (int layer = 0; layer < 4; ++layer)
      steps += "{\"torch.distributed.fsdp.fully_shard\":{\"module\":\"" + std::to_string(layer) +
               "\",\"reshard_after_forward\":" + reshard + "}},";
    return run_plan(four, "{\"world_size\":8,\"torch_version\":\"2.15\",\"iterations\":2,\"steps\":[" + steps +
                              "{\"torch.distributed.fsdp.fully_shard\":{\"module\":\"\"}}]}")
        .memory.unsharded_params_peak;
  };
  EXPECT_LT(peak_unsharded("true"), peak_unsharded("4"));
  EXPECT_LT(peak_unsharded("4"), peak_unsharded("2"));
  EXPECT_LT(peak_unsharded("2"), peak_unsharded("false"));
}

// A sub-group's instances partition each full group into runs, in rank order, and every consumer's
// lookups agree: instance `group_index(rank)` of `all_groups` is `group_ranks(rank)`.
TEST(ProgramGroups, RunsOfKPartitionEveryGroupAndRoundTrip) {
  Program program;
  program.mesh = DeviceMesh({2, 4}, {"dp_replicate", "dp_shard"});
  program.world_size = 8;
  const int g = program.group_id({1}, 2);
  EXPECT_EQ(program.groups[g].name, "dp_shard(2)");
  EXPECT_EQ(program.groups[g].size, 2);
  EXPECT_EQ(program.group_id({1}, 4), program.group_id({1}));  // one run is the whole group
  EXPECT_EQ(program.all_groups(g), (std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  for (int rank = 0; rank < 8; ++rank)
    EXPECT_EQ(program.all_groups(g)[program.group_index(g, rank)], program.group_ranks(g, rank)) << rank;
  // Runs over two dims follow the members' row-major order: on [2, 4] over both, rank 5 is at 5.
  const int both = program.group_id({0, 1}, 4);
  EXPECT_EQ(program.all_groups(both), (std::vector<std::vector<int>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(program.group_ranks(both, 5), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(program.group_index(both, 5), 1);
  const Program back = program_from_json(program_to_json(program), "program.json");
  ASSERT_EQ(back.groups.size(), program.groups.size());
  EXPECT_EQ(back.groups[g].block_size, 2);
  EXPECT_EQ(back.groups[g].name, "dp_shard(2)");

  json bad = program_to_json(program);
  bad["groups"][g]["block_size"] = 3;
  try {
    program_from_json(bad, "program.json");
    ADD_FAILURE() << "a block size that does not divide the group was accepted";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "program.json: groups[0].block_size: expected a divisor of the group's 4 members");
  }
}
