// Op roles: every op the planner emits says what it acts on (what `stratsim run --train` runs on
// real values), the JSON form keeps roles and placements, and the layouts PlanResult reports
// agree with the program.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "stratsim/core/errors.hpp"
#include "stratsim/core/json_reader.hpp"
#include "stratsim/core/model_io.hpp"
#include "stratsim/core/plan.hpp"
#include "stratsim/core/planner.hpp"

namespace stratsim::test {
namespace {

using core::OpRole;

core::PlanResult plan_of(const std::string& model, const std::string& plan) {
  return core::plan_training(core::load_model(model), core::load_plan(plan));
}

TEST(ProgramRoles, EveryOpOfTheBuiltinPlansHasARole) {
  for (const auto& [model, plan] :
       {std::pair{"zoo:Net", "builtin:ddp"}, std::pair{"zoo:Net", "builtin:fsdp"},
        std::pair{"zoo:Net", "builtin:ddp-tp"}, std::pair{"zoo:TestModel", "builtin:fsdp-tp"},
        std::pair{"zoo:CompositeParamModel", "builtin:fsdp"}}) {
    SCOPED_TRACE(std::string(model) + " " + plan);
    const core::PlanResult planned = plan_of(model, plan);
    for (const core::ProgramOp& op : planned.program.ops) {
      EXPECT_NE(op.role, OpRole::none) << op.name;
      const bool collective_role = op.role >= OpRole::ddp_param_count;
      EXPECT_EQ(collective_role, op.type == core::OpType::collective) << op.name;
      if (op.role == OpRole::param_matmul) {
        EXPECT_EQ(op.params.size(), 1u) << op.name;
      }
      if (op.role == OpRole::ddp_bucket || op.role == OpRole::fsdp_unshard) {
        EXPECT_FALSE(op.params.empty()) << op.name;
      }
    }
  }
}

TEST(ProgramRoles, RolesAndPlacementsSurviveJson) {
  const core::PlanResult planned = plan_of("zoo:TestModel", "builtin:fsdp-tp");
  const core::Program back = core::program_from_json(core::program_to_json(planned.program), "test");
  ASSERT_EQ(back.ops.size(), planned.program.ops.size());
  int redistributions = 0;
  for (std::size_t i = 0; i < back.ops.size(); ++i) {
    const core::ProgramOp &a = planned.program.ops[i], &b = back.ops[i];
    EXPECT_EQ(a.role, b.role) << a.name;
    EXPECT_EQ(a.params, b.params) << a.name;
    if (a.role >= OpRole::tp_input && a.role <= OpRole::tp_grad_output) {
      ++redistributions;
      EXPECT_EQ(a.from, b.from) << a.name;
      EXPECT_EQ(a.to, b.to) << a.name;
    }
  }
  EXPECT_EQ(redistributions, 12);  // per iteration: net1 input AG, net2 output RS, their backward RS / AG
  // Seed vector 12: the net1 input goes Shard(0) -> Replicate().
  for (const core::ProgramOp& op : back.ops)
    if (op.role == OpRole::tp_input) {
      EXPECT_EQ(op.from, core::Placement::shard(0));
      EXPECT_EQ(op.to, core::Placement::replicate());
    }
  nlohmann::json doc = core::program_to_json(planned.program);
  doc["ops"][0]["role"] = "teleport";
  EXPECT_THROW(core::program_from_json(doc, "test"), core::InputError);
}

TEST(ProgramRoles, LayoutsDescribeWhatEachRankHolds) {
  const core::PlanResult planned = plan_of("zoo:TestModel", "builtin:fsdp-tp");
  EXPECT_EQ(planned.input_placement, core::Placement::shard(0));  // distribute_module(mlp_norm, Shard(0)) comes first
  ASSERT_EQ(planned.fsdp.size(), 1u);
  const core::FsdpUnitReport& unit = planned.fsdp.front();
  // Local shards 80 + 8 + 80 + 10 + 10 = 188 elements, laid out back to back.
  EXPECT_EQ(unit.offsets, (std::vector<std::int64_t>{0, 80, 88, 168, 178}));
  EXPECT_EQ(unit.numel, 188);
  const core::Model model = core::load_model("zoo:TestModel");
  const int net1 = model.find_param("mlp.net1.weight"), net2 = model.find_param("mlp.net2.weight");
  EXPECT_EQ(planned.params[net1].placement, core::Placement::shard(0));
  EXPECT_EQ(planned.params[net1].local_shape, (std::vector<std::int64_t>{8, 10}));
  EXPECT_EQ(planned.params[net2].placement, core::Placement::shard(1));
  EXPECT_EQ(planned.params[net2].fsdp_unit, 0);

  // use_orig_params aligns each parameter to 16 bytes of the compute dtype (vector 16: a bf16
  // param_dtype puts Linear(10, 10)'s bias at 104 instead of 100).
  const nlohmann::json linear = {
      {"name", "L"}, {"modules", {{{"name", "l"}, {"type", "Linear"}, {"in_features", 10}, {"out_features", 10}}}}};
  for (auto [dtype, bias] : {std::pair{"float32", 100}, std::pair{"bfloat16", 104}}) {
    const nlohmann::json plan = {
        {"world_size", 4},
        {"steps",
         {{{"fully_shard",
            {{"module", ""}, {"use_orig_params", true}, {"mixed_precision", {{"param_dtype", dtype}}}}}}}}};
    const core::PlanResult orig = core::plan_training(core::parse_model(core::JsonReader(linear, "model")),
                                                      core::parse_plan(core::JsonReader(plan, "plan")));
    ASSERT_EQ(orig.fsdp.size(), 1u);
    EXPECT_EQ(orig.fsdp.front().offsets, (std::vector<std::int64_t>{0, bias})) << dtype;
  }
}

}  // namespace
}  // namespace stratsim::test

namespace stratsim::test {
namespace {

// GEMM shapes (ProgramOp::gemms): a linear layer's forward is one (tokens, out, in) GEMM, its
// backward grad_weight (out, in, tokens) plus grad_input (tokens, in, out) unless its input needs
// no gradient; tensor parallelism shrinks the sharded side; the shapes' FLOPs are the op's FLOPs
// less the bias; JSON keeps them.
TEST(GemmShapes, LinearLayersCarryTheirShapes) {
  for (const char* plan : {"builtin:ddp", "builtin:ddp-tp"}) {
    SCOPED_TRACE(plan);
    const core::PlanResult planned = plan_of("zoo:Net", plan);
    int forwards = 0, first_layer_backwards = 0;
    for (const core::ProgramOp& op : planned.program.ops) {
      if (op.op_class != "gemm" || op.role != OpRole::leaf) continue;
      ASSERT_FALSE(op.gemms.empty()) << op.name;
      double shape_flops = 0;
      for (const core::GemmShape& g : op.gemms) shape_flops += g.flops();
      EXPECT_LE(shape_flops, op.flops) << op.name;
      EXPECT_GT(shape_flops, 0.9 * op.flops) << op.name;  // the rest is the bias
      if (op.phase == core::Phase::forward) {
        ++forwards;
        EXPECT_EQ(op.gemms.size(), 1u) << op.name;
      } else if (op.phase == core::Phase::backward) {
        EXPECT_LE(op.gemms.size(), 2u) << op.name;
        const core::GemmShape& weight = op.gemms.back();
        if (op.gemms.size() == 2) {  // grad_input (t, in, out) then grad_weight (out, in, t)
          EXPECT_EQ(op.gemms[0].m, weight.k) << op.name;
          EXPECT_EQ(op.gemms[0].n, weight.n) << op.name;
          EXPECT_EQ(op.gemms[0].k, weight.m) << op.name;
        } else {
          ++first_layer_backwards;
        }
      }
    }
    EXPECT_GT(forwards, 0);
    EXPECT_GT(first_layer_backwards, 0) << "the first layer's input needs no gradient";
    const core::Program back = core::program_from_json(core::program_to_json(planned.program), "test");
    for (std::size_t i = 0; i < back.ops.size(); ++i)
      EXPECT_EQ(back.ops[i].gemms, planned.program.ops[i].gemms) << back.ops[i].name;
  }
}

TEST(GemmShapes, TensorParallelShardsTheShapes) {
  const auto widths = [](const char* plan) {
    std::vector<std::int64_t> n;
    for (const core::ProgramOp& op : plan_of("zoo:Net", plan).program.ops)
      if (op.op_class == "gemm" && op.role == OpRole::leaf && op.phase == core::Phase::forward && op.iteration == 1)
        n.push_back(op.gemms[0].n * op.gemms[0].k);
    return n;
  };
  const std::vector<std::int64_t> full = widths("builtin:ddp"), sharded = widths("builtin:ddp-tp");
  ASSERT_EQ(full.size(), sharded.size());
  bool smaller = false;
  for (std::size_t i = 0; i < full.size(); ++i) {
    EXPECT_LE(sharded[i], full[i]);
    smaller = smaller || sharded[i] < full[i];
  }
  EXPECT_TRUE(smaller) << "tensor parallelism shards the weight, so some GEMM shrinks";
}

}  // namespace
}  // namespace stratsim::test
