// The planner against the countable expectations of the seed PyTorch tests
// (/work/shared/seeds): test_compose.py, test_replicate.py, test_replicate_with_compiler.py,
// test_fsdp_tp_integration.py and test_data_parallel.py. The seeds check numerics; what is
// checked here is what those runs imply about units, buckets and collectives (W = 2 unless the
// seed says otherwise).
#include <gtest/gtest.h>

#include "planner_test_support.hpp"

using namespace stratsim::core;
using namespace stratsim::test;

namespace {

using V64 = std::vector<std::int64_t>;
using Names = std::vector<std::string>;
using Counts = std::map<std::string, int>;

const int kForward = phase_of(Phase::forward);
const int kBackward = phase_of(Phase::backward);
const int kRecompute = phase_of(Phase::recompute);
const int kInit = phase_of(Phase::init);

std::string steps_plan(const std::string& steps, int world = 2, int iterations = 3) {
  return "{\"world_size\":" + std::to_string(world) + ",\"iterations\":" + std::to_string(iterations) +
         ",\"steps\":[" + steps + "]}";
}

// Every trainable parameter has exactly one manager (a DDP instance or an FSDP unit).
void expect_each_param_managed_once(const Model& model, const PlanResult& r) {
  for (const auto& [name, list] : managers(model, r)) {
    EXPECT_EQ(list.size(), 1u) << name << " has " << list.size() << " managers";
  }
}

// Collective ops of the program in order, for one iteration, with their (op, bytes, reason).
std::vector<std::string> program_order(const PlanResult& r, int it) {
  std::vector<std::string> out;
  for (const ProgramOp& o : r.program.ops)
    if (o.iteration == it) out.push_back(o.name);
  return out;
}

std::ptrdiff_t position(const std::vector<std::string>& ops, const std::string& name) {
  auto it = std::find(ops.begin(), ops.end(), name);
  return it == ops.end() ? -1 : it - ops.begin();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// test_compose.py test_fully_shard_replicate_composability: configs read bottom-up, comma per
// level; r = replicate, f = fully_shard, m = manual, a = auto wrap (ModuleWrapPolicy({UnitModule})).

namespace {
struct UnitSpec {
  std::string module;
  Names params;
  bool root;
  std::int64_t numel;
};
struct ComposeCase {
  std::string config;
  std::string model;
  std::string steps;
  std::map<std::string, Names> ddp;  // replicated module -> _param_names (relative)
  std::vector<UnitSpec> units;
  Counts steady;                     // collectives of iteration 3
};

const Names kUnitParams = {"l1.weight", "l1.bias", "seq.1.weight", "seq.1.bias", "l2.weight", "l2.bias"};
Names prefixed(const std::string& prefix, const Names& names) {
  Names out;
  for (const auto& n : names) out.push_back(prefix + n);
  return out;
}

std::vector<ComposeCase> compose_cases() {
  const Names u1 = prefixed("u1.", kUnitParams), u2 = prefixed("u2.", kUnitParams);
  Names composite_ddp = u1;
  composite_ddp.insert(composite_ddp.end(), u2.begin(), u2.end());
  composite_ddp.push_back("l2.weight");
  composite_ddp.push_back("l2.bias");
  Names root_with_u2 = {"p", "l.weight", "l.bias"};
  root_with_u2.insert(root_with_u2.end(), u2.begin(), u2.end());
  const UnitSpec root_only{"", {"p", "l.weight", "l.bias"}, true, 20100};
  const UnitSpec u2_unit{"u2", u2, false, 30300};
  return {
      {"1fm,1r", "zoo:CompositeModel", R"({"fully_shard":{"module":"l1"}},{"replicate":{"module":""}})",
       {{"", composite_ddp}},
       {{"l1", {"l1.weight", "l1.bias"}, true, 10100}},
       {{"c10d._allgather_base_", 1}, {"c10d._reduce_scatter_base_", 1}, {"c10d.allreduce_", 1}}},
      {"1r,1fm", "zoo:CompositeParamModel", R"({"replicate":{"module":"u1"}},{"fully_shard":{"module":""}})",
       {{"u1", kUnitParams}},
       {{"", root_with_u2, true, 50400}},
       {{"c10d._allgather_base_", 1}, {"c10d._reduce_scatter_base_", 1}, {"c10d.allreduce_", 1}}},
      {"1r,1fa", "zoo:CompositeParamModel",
       R"({"replicate":{"module":"u1"}},{"fully_shard":{"module":"","policy":{"module_types":["UnitModule"]}}})",
       {{"u1", kUnitParams}},
       {u2_unit, root_only},
       {{"c10d._allgather_base_", 3}, {"c10d._reduce_scatter_base_", 2}, {"c10d.allreduce_", 1}}},
      {"1r1fm,1fm", "zoo:CompositeParamModel",
       R"({"replicate":{"module":"u1"}},{"fully_shard":{"module":"u2"}},{"fully_shard":{"module":""}})",
       {{"u1", kUnitParams}},
       {u2_unit, root_only},
       {{"c10d._allgather_base_", 3}, {"c10d._reduce_scatter_base_", 2}, {"c10d.allreduce_", 1}}},
      {"1r1fa,1fm", "zoo:CompositeParamModel",
       R"({"replicate":{"module":"u1"}},{"fully_shard":{"module":"u2","policy":{"module_types":["UnitModule"]}}},)"
       R"({"fully_shard":{"module":""}})",
       {{"u1", kUnitParams}},
       {u2_unit, root_only},
       {{"c10d._allgather_base_", 3}, {"c10d._reduce_scatter_base_", 2}, {"c10d.allreduce_", 1}}},
      // u1.seq and u2.seq sit under replicated modules, which the root's lazy init does not
      // traverse: each stays its own FSDP root (not resharded after forward: one all-gather).
      {"1fm1fm,1r1r,1fm", "zoo:CompositeParamModel",
       R"({"fully_shard":{"module":"u1.seq"}},{"fully_shard":{"module":"u2.seq"}},{"replicate":{"module":"u1"}},)"
       R"({"replicate":{"module":"u2"}},{"fully_shard":{"module":""}})",
       {{"u1", {"l1.weight", "l1.bias", "l2.weight", "l2.bias"}}, {"u2", {"l1.weight", "l1.bias", "l2.weight", "l2.bias"}}},
       {{"u1.seq", {"u1.seq.1.weight", "u1.seq.1.bias"}, true, 10100},
        {"u2.seq", {"u2.seq.1.weight", "u2.seq.1.bias"}, true, 10100},
        root_only},
       {{"c10d._allgather_base_", 3}, {"c10d._reduce_scatter_base_", 3}, {"c10d.allreduce_", 2}}},
  };
}
}  // namespace

TEST(SeedCompose, FullyShardReplicateComposability) {
  for (const ComposeCase& c : compose_cases()) {
    SCOPED_TRACE(c.config);
    const Model model = load_model(c.model);
    const PlanResult r = run_plan(model, steps_plan(c.steps));
    expect_each_param_managed_once(model, r);

    ASSERT_EQ(r.ddp.size(), c.ddp.size()) << describe(r);
    for (const auto& [module, names] : c.ddp) {
      const DdpReport* ddp = find_ddp(r, module);
      ASSERT_NE(ddp, nullptr) << module;
      EXPECT_EQ(ddp->params, names) << module;
      // Small models: one bucket before and after the rebuild, holding every variable.
      ASSERT_EQ(ddp->initial.size(), 1u);
      EXPECT_EQ(ddp->initial[0].indices.size(), names.size());
      ASSERT_EQ(ddp->rebuilt.size(), 1u);
    }

    std::size_t units_with_params = 0;
    for (const FsdpUnitReport& unit : r.fsdp) units_with_params += unit.params.empty() ? 0 : 1;
    EXPECT_EQ(units_with_params, c.units.size());
    for (const UnitSpec& spec : c.units) {
      const FsdpUnitReport* unit = find_unit(r, spec.module);
      ASSERT_NE(unit, nullptr) << spec.module;
      EXPECT_EQ(unit->params, spec.params) << spec.module;
      EXPECT_EQ(unit->root, spec.root) << spec.module;
      EXPECT_EQ(unit->numel, spec.numel) << spec.module;
      EXPECT_EQ(unit->shard_numel, (spec.numel + 1) / 2) << spec.module;
    }
    EXPECT_EQ(training_counts(iteration(r, 3)), c.steady) << describe(iteration(r, 3));
    // Non-root FULL_SHARD units gather twice (forward and pre-backward), roots once.
    for (const FsdpUnitReport& unit : r.fsdp) {
      if (unit.params.empty()) continue;
      Filter f = op("c10d._allgather_base_");
      f.module = unit.module;
      EXPECT_EQ(select(iteration(r, 3), f).size(), unit.root ? 1u : 2u) << unit.module;
    }
  }
}

// replicate() collects its parameters in its first forward (lazy init), so the order of the calls
// does not matter: "1fm1fm,1r1r,1fm" with replicate() called before the inner fully_shard().
TEST(SeedCompose, ReplicateCollectsParametersLazily) {
  const Model model = load_model("zoo:CompositeParamModel");
  const PlanResult r = run_plan(
      model, steps_plan(R"({"replicate":{"module":"u1"}},{"replicate":{"module":"u2"}},{"fully_shard":{"module":"u1.seq"}},)"
                        R"({"fully_shard":{"module":"u2.seq"}},{"fully_shard":{"module":""}})"));
  expect_each_param_managed_once(model, r);
  for (const char* name : {"u1", "u2"}) {
    ASSERT_NE(find_ddp(r, name), nullptr);
    EXPECT_EQ(find_ddp(r, name)->params, (Names{"l1.weight", "l1.bias", "l2.weight", "l2.bias"}));
  }
  for (const char* name : {"u1.seq", "u2.seq"}) {
    ASSERT_NE(find_unit(r, name), nullptr);
    EXPECT_EQ(find_unit(r, name)->params.size(), 2u);
    EXPECT_TRUE(find_unit(r, name)->root);
  }
  EXPECT_EQ(training_counts(iteration(r, 3)),
            (Counts{{"c10d._allgather_base_", 3}, {"c10d._reduce_scatter_base_", 3}, {"c10d.allreduce_", 2}}));
}

// DistributedDataParallel(self._param_list) refuses an empty list: replicate() of a module whose
// parameters all belong to fully_shard units fails in its first forward.
TEST(SeedCompose, ReplicateWithNothingLeftFails) {
  const std::string error = plan_error([] {
    run_plan("zoo:UnitModule", steps_plan(R"({"fully_shard":{"module":"seq"}},{"replicate":{"module":"seq"}})"));
  });
  EXPECT_NE(error.find("Cannot apply `replicate()`"), std::string::npos) << error;
  const std::string empty = plan_error([] {
    run_plan("zoo:CompositeModel",
             steps_plan(R"({"replicate":{"module":"u1"}},{"fully_shard":{"module":"u1.l1"}},{"fully_shard":{"module":"u1.seq"}},)"
                        R"({"fully_shard":{"module":"u1.l2"}})"));
  });
  EXPECT_NE(empty.find("DistributedDataParallel is not needed when a module doesn't have any parameter that requires a "
                       "gradient"),
            std::string::npos)
      << empty;
}

// test_fully_shard_replicate_correct_replicate_params: replicate's _param_names are the root's
// own parameter and those of its non-UnitModule children.
TEST(SeedCompose, FullyShardReplicateCorrectReplicateParams) {
  const Model model = load_model("zoo:CompositeParamModel");
  const PlanResult r = run_plan(
      model, steps_plan(R"({"fully_shard":{"module":"u1","policy":{"module_types":["Linear"]}}},)"
                        R"({"fully_shard":{"module":"u2","policy":{"module_types":["Linear"]}}},{"replicate":{"module":""}})"));
  ASSERT_EQ(r.ddp.size(), 1u);
  const std::set<std::string> names(r.ddp[0].params.begin(), r.ddp[0].params.end());
  EXPECT_EQ(names, (std::set<std::string>{"l.weight", "l.bias", "p"}));
  EXPECT_EQ(r.ddp[0].params, (Names{"p", "l.weight", "l.bias"}));
  expect_each_param_managed_once(model, r);
  // The Linear policy makes every Linear of u1/u2 a unit; u1 and u2 keep no parameters.
  for (const char* name : {"u1.l1", "u1.seq.1", "u1.l2", "u2.l1", "u2.seq.1", "u2.l2"}) {
    const FsdpUnitReport* unit = find_unit(r, name);
    ASSERT_NE(unit, nullptr) << name;
    EXPECT_EQ(unit->params.size(), 2u);
    EXPECT_FALSE(unit->root);
  }
  for (const char* name : {"u1", "u2"}) {
    ASSERT_NE(find_unit(r, name), nullptr);
    EXPECT_TRUE(find_unit(r, name)->params.empty());
    EXPECT_TRUE(find_unit(r, name)->root);
  }
}

// test_composable_fsdp_replicate.
TEST(SeedCompose, ComposableFsdpReplicate) {
  const std::string error = plan_error([] {
    run_plan("zoo:CompositeModel", steps_plan(R"({"fully_shard":{"module":"l1"}},{"replicate":{"module":"l1"}})"));
  });
  EXPECT_NE(error.find("Cannot apply `replicate()` on a Module already managed by `fully_shard`"), std::string::npos)
      << error;
  const PlanResult r =
      run_plan("zoo:CompositeModel", steps_plan(R"({"fully_shard":{"module":"l1"}},{"replicate":{"module":"l2"}})"));
  ASSERT_NE(find_ddp(r, "l2"), nullptr);
  EXPECT_EQ(find_ddp(r, "l2")->params, (Names{"weight", "bias"}));
  ASSERT_NE(find_unit(r, "l1"), nullptr);
}

// test_state_dict_fsdp_submodules: sibling units with different strategies (training traffic).
TEST(SeedCompose, SiblingUnitsWithDifferentStrategies) {
  const PlanResult r = run_plan("zoo:CompositeModel",
                                steps_plan(R"({"fully_shard":{"module":"u1","strategy":"FULL_SHARD"}},)"
                                           R"({"fully_shard":{"module":"u2","strategy":"NO_SHARD"}})"));
  ASSERT_NE(find_unit(r, "u1"), nullptr);
  ASSERT_NE(find_unit(r, "u2"), nullptr);
  EXPECT_TRUE(find_unit(r, "u1")->root);
  EXPECT_TRUE(find_unit(r, "u2")->root);
  EXPECT_EQ(counts_of(iteration(r, 3)),
            (Counts{{"c10d._allgather_base_", 1}, {"c10d._reduce_scatter_base_", 1}, {"c10d.allreduce_", 1}}));
  EXPECT_EQ(bytes_of(select(iteration(r, 3), op("c10d.allreduce_"))), (V64{121200}));
}

// ---------------------------------------------------------------------------------------------
// test_compose.py activation checkpointing + fully_shard.

// test_wrap_same_submodule: checkpoint(seq), fully_shard(seq, policy=ModuleWrapPolicy({Linear})).
// The unit seq.1 sits inside the checkpointed region. Backward reaches the region through seq.2
// (ReLU), whose saved output lives in the region: its unpack recomputes the region before any
// gradient reaches seq.1's output, so seq.1's pre-backward hook has not run, its recomputed
// pre-forward is a normal one and all-gathers (pytorch-semantics.md §5.4), then the real
// pre-backward gathers again. l1/l2 are not managed: no collectives touch them.
TEST(SeedComposeCheckpoint, WrapSameSubmodule) {
  const Model model = load_model("zoo:UnitModule");
  const PlanResult r = run_plan(
      model, steps_plan(R"({"checkpoint":{"module":"seq"}},{"fully_shard":{"module":"seq","policy":{"module_types":["Linear"]}}})"));
  ASSERT_EQ(r.fsdp.size(), 2u);
  ASSERT_NE(find_unit(r, "seq.1"), nullptr);
  EXPECT_FALSE(find_unit(r, "seq.1")->root);
  EXPECT_TRUE(find_unit(r, "seq")->root);
  EXPECT_TRUE(find_unit(r, "seq")->params.empty());
  for (const IterationRecord& it : r.iterations) {
    EXPECT_EQ(select(it, op("c10d._allgather_base_", kForward)).size(), 1u) << describe(it);
    EXPECT_EQ(select(it, op("c10d._allgather_base_", kRecompute)).size(), 1u);
    EXPECT_EQ(select(it, op("c10d._allgather_base_", kBackward)).size(), 1u);
    EXPECT_EQ(select(it, op("c10d._reduce_scatter_base_", kBackward)).size(), 1u);
    EXPECT_EQ(it.collectives.size(), 4u);
    for (const CollectiveRecord& c : it.collectives) {
      EXPECT_EQ(c.module, "seq.1");
      EXPECT_EQ(c.params, (Names{"seq.1.weight", "seq.1.bias"}));
    }
  }
  // Recompute first, then the pre-backward gather.
  const auto& ops = iteration(r, 3).collectives;
  ASSERT_EQ(ops.size(), 4u);
  EXPECT_EQ(ops[1].phase, Phase::recompute);
  EXPECT_EQ(ops[2].phase, Phase::backward);
  EXPECT_EQ(ops[2].op, "c10d._allgather_base_");
}

// The contrast: a checkpointed region inside a non-root unit. The unit's pre-backward hook (on
// its output) runs before the region is recomputed, so the recomputation gathers nothing.
TEST(SeedComposeCheckpoint, RecomputeInsideUnitGathersNothing) {
  const PlanResult r = run_plan(
      "zoo:UnitModule",
      steps_plan(R"({"checkpoint":{"module":"seq.1"}},{"fully_shard":{"module":"","policy":{"module_types":["Sequential"]}}})"));
  ASSERT_NE(find_unit(r, "seq"), nullptr);
  EXPECT_FALSE(find_unit(r, "seq")->root);
  for (const IterationRecord& it : r.iterations) {
    EXPECT_TRUE(select(it, op("", kRecompute)).empty()) << describe(it);
    Filter seq = op("c10d._allgather_base_");
    seq.module = "seq";
    EXPECT_EQ(select(it, seq).size(), 2u) << describe(it);
    EXPECT_EQ(counts_of(it), (Counts{{"c10d._allgather_base_", 3}, {"c10d._reduce_scatter_base_", 2}}));
  }
}

// The unit is the last module of a checkpointed region (its output is the region's output):
// its pre-backward hook fires before the recomputation, which then skips it (BACKWARD_PRE).
TEST(SeedComposeCheckpoint, UnitAtRegionOutputIsGatheredOnce) {
  const PlanResult r = run_plan(
      "zoo:CompositeModel", steps_plan(R"({"checkpoint":{"module":"u1"}},{"fully_shard":{"module":"u1.l2","backward_prefetch":null}},)"
                                       R"({"fully_shard":{"module":"","backward_prefetch":null}})"));
  ASSERT_NE(find_unit(r, "u1.l2"), nullptr);
  EXPECT_FALSE(find_unit(r, "u1.l2")->root);
  for (const IterationRecord& it : r.iterations) {
    Filter l2 = op("c10d._allgather_base_");
    l2.module = "u1.l2";
    const auto gathers = select(it, l2);
    ASSERT_EQ(gathers.size(), 2u) << describe(it);
    EXPECT_EQ(gathers[0].phase, Phase::forward);
    EXPECT_EQ(gathers[1].phase, Phase::backward);
    EXPECT_TRUE(select(it, op("", kRecompute)).empty());
  }
  // The recomputed u1.l2 forward runs after u1.l2's pre-backward gather.
  const auto ops = program_order(r, 3);
  const std::ptrdiff_t gather = position(ops, "all_gather fsdp unit u1.l2 (pre-backward)");
  const std::ptrdiff_t recompute = position(ops, "u1.l2.recompute");
  ASSERT_GE(gather, 0);
  ASSERT_GE(recompute, 0);
  EXPECT_LT(gather, recompute);
}

// _test_checkpoint_fsdp_submodules: fully_shard(u1), fully_shard(u2) (two roots), checkpoint of
// their seq: roots stay unsharded, so the recomputation never gathers.
TEST(SeedComposeCheckpoint, CheckpointFsdpSubmodules) {
  const Model model = load_model("zoo:CompositeModel");
  const PlanResult r =
      run_plan(model, steps_plan(R"({"fully_shard":{"module":"u1"}},{"fully_shard":{"module":"u2"}},)"
                                 R"({"checkpoint":{"module":"u1.seq"}},{"checkpoint":{"module":"u2.seq"}})"));
  ASSERT_EQ(r.fsdp.size(), 2u);
  for (const FsdpUnitReport& unit : r.fsdp) {
    EXPECT_TRUE(unit.root);
    EXPECT_EQ(unit.numel, 30300);
  }
  for (const IterationRecord& it : r.iterations) {
    EXPECT_EQ(counts_of(it), (Counts{{"c10d._allgather_base_", 2}, {"c10d._reduce_scatter_base_", 2}})) << describe(it);
    EXPECT_TRUE(select(it, op("", kRecompute)).empty());
  }
  // l1 and l2 stay local: nothing manages them.
  const auto managed = managers(model, r);
  for (const char* name : {"l1.weight", "l1.bias", "l2.weight", "l2.bias"}) EXPECT_TRUE(managed.at(name).empty());
}

// test_checkpoint_fsdp_submodules_with_param (+ _no_shard): one root unit over everything.
TEST(SeedComposeCheckpoint, CheckpointFsdpSubmodulesWithParam) {
  const std::string checkpoints = R"({"checkpoint":{"module":"u1.seq"}},{"checkpoint":{"module":"u2.seq"}},)";
  {
    const PlanResult r = run_plan("zoo:CompositeParamModel", steps_plan(checkpoints + R"({"fully_shard":{"module":""}})"));
    ASSERT_EQ(r.fsdp.size(), 1u);
    EXPECT_EQ(r.fsdp[0].params.size(), 15u);
    EXPECT_EQ(r.fsdp[0].params.front(), "p");
    EXPECT_EQ(r.fsdp[0].numel, 80700);
    EXPECT_EQ(r.fsdp[0].shard_numel, 40350);
    for (const IterationRecord& it : r.iterations) {
      EXPECT_EQ(counts_of(it), (Counts{{"c10d._allgather_base_", 1}, {"c10d._reduce_scatter_base_", 1}})) << describe(it);
      EXPECT_EQ(bytes_of(select(it, op("c10d._allgather_base_"))), (V64{322800}));
    }
  }
  {
    const PlanResult r = run_plan("zoo:CompositeParamModel",
                                  steps_plan(checkpoints + R"({"fully_shard":{"module":"","strategy":"NO_SHARD"}})"));
    for (const IterationRecord& it : r.iterations) {
      EXPECT_EQ(counts_of(it), (Counts{{"c10d.allreduce_", 1}})) << describe(it);
      EXPECT_EQ(bytes_of(select(it, op("c10d.allreduce_"))), (V64{322800}));
    }
  }
}

// _test_checkpoint_fully_shard_cast_forward_inputs: fully_shard(c2, fp16), checkpoint(c2.l) or
// checkpoint(c2), fully_shard(model, fp32). c2's pre-backward precedes the recomputation in both.
TEST(SeedComposeCheckpoint, CheckpointFullyShardCastForwardInputs) {
  for (const char* region : {"c2.l", "c2"}) {
    for (const char* prefetch : {"", R"(,"backward_prefetch":null)"}) {
      SCOPED_TRACE(std::string(region) + prefetch);
      const std::string steps =
          std::string(R"({"fully_shard":{"module":"c2","mixed_precision":{"param_dtype":"float16","cast_forward_inputs":true})") +
          prefetch + R"(}},{"checkpoint":{"module":")" + region +
          R"("}},{"fully_shard":{"module":"","mixed_precision":{"param_dtype":"float32","cast_forward_inputs":true})" +
          prefetch + "}}";
      const PlanResult r = run_plan("zoo:SaveForwardInputsModel", steps_plan(steps));
      ASSERT_NE(find_unit(r, "c2"), nullptr);
      EXPECT_FALSE(find_unit(r, "c2")->root);
      EXPECT_TRUE(find_unit(r, "")->root);
      for (const IterationRecord& it : r.iterations) {
        Filter c2 = op("c10d._allgather_base_");
        c2.module = "c2";
        const auto gathers = select(it, c2);
        ASSERT_EQ(gathers.size(), 2u) << describe(it);
        for (const auto& g : gathers) {
          EXPECT_EQ(g.bytes, 20200);  // fp16
          EXPECT_EQ(g.dtype, DType::float16);
          EXPECT_NE(g.phase, Phase::recompute);
        }
        Filter root = op("c10d._allgather_base_");
        root.module = "";
        EXPECT_EQ(bytes_of(select(it, root)), (V64{40400}));
        EXPECT_EQ(select(it, op("c10d._reduce_scatter_base_")).size(), 2u);
      }
      const auto ops = program_order(r, 3);
      const std::ptrdiff_t recompute = position(ops, "c2.l.recompute");
      ASSERT_GE(recompute, 0);
      std::ptrdiff_t last_gather = -1;
      for (std::size_t i = 0; i < ops.size(); ++i)
        if (ops[i].starts_with("all_gather fsdp unit c2 (")) last_gather = static_cast<std::ptrdiff_t>(i);
      EXPECT_LT(last_gather, recompute);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// test_replicate.py (Net = 3 x Linear(2, 2) = zoo:ReplicateNet, W = 2).

TEST(SeedReplicate, SingleModule) {
  const Model model = load_model("zoo:ReplicateNet");
  const PlanResult r = run_plan(model, steps_plan(R"({"replicate":{"module":""}})"));
  expect_each_param_managed_once(model, r);
  ASSERT_EQ(r.ddp.size(), 1u);
  EXPECT_EQ(bucket_bytes(r.ddp[0].initial), (V64{72}));
  EXPECT_EQ(bucket_indices(r.ddp[0].rebuilt), (std::vector<std::vector<int>>{{5, 4, 3, 2, 1, 0}}));
  for (const IterationRecord& it : r.iterations)
    EXPECT_EQ(bytes_of(select(it, op("c10d.allreduce_", kBackward))), (V64{72})) << describe(it);
}

TEST(SeedReplicate, MultiModule) {
  const Model model = load_model("zoo:ReplicateNet");
  const PlanResult r = run_plan(
      model, steps_plan(R"({"replicate":{"module":"fc1"}},{"replicate":{"module":"fc2"}},{"replicate":{"module":"fc3"}})"));
  expect_each_param_managed_once(model, r);
  ASSERT_EQ(r.ddp.size(), 3u);
  for (const DdpReport& ddp : r.ddp) {
    EXPECT_EQ(ddp.params, (Names{"weight", "bias"})) << ddp.module;
    EXPECT_EQ(bucket_bytes(ddp.initial), (V64{24}));
    EXPECT_EQ(bucket_indices(ddp.rebuilt), (std::vector<std::vector<int>>{{1, 0}}));
  }
  // Each instance builds lazily in its first forward and rebuilds once.
  EXPECT_EQ(select(iteration(r, 1), op("c10d.allgather_", kInit)).size(), 3u);
  EXPECT_EQ(bytes_of(select(iteration(r, 2), op("c10d.broadcast_", kForward, "ddp rebuild"))),
            (V64{12, 4, 12, 4, 12, 4}));
  for (const IterationRecord& it : r.iterations)
    EXPECT_EQ(bytes_of(select(it, op("c10d.allreduce_", kBackward))), (V64{24, 24, 24})) << describe(it);
}

// test_replicate_ignore_module: fc1 is ignored, so its gradients are never reduced.
TEST(SeedReplicate, IgnoreModule) {
  const PlanResult r = run_plan("zoo:ReplicateNet", steps_plan(R"({"replicate":{"module":"","ignored_modules":["fc1"]}})"));
  ASSERT_EQ(r.ddp.size(), 1u);
  const DdpReport& ddp = r.ddp[0];
  EXPECT_EQ(ddp.params, (Names{"fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"}));
  for (const auto* layout : {&ddp.initial, &ddp.rebuilt}) {
    ASSERT_FALSE(layout->empty());
    for (const DdpBucket& bucket : *layout)
      for (const std::string& name : bucket.params) EXPECT_FALSE(name.starts_with("fc1.")) << name;
  }
  EXPECT_EQ(bucket_bytes(ddp.rebuilt), (V64{48}));
  for (const IterationRecord& it : r.iterations) {
    EXPECT_EQ(bytes_of(select(it, op("c10d.allreduce_", kBackward))), (V64{48}));
    for (const CollectiveRecord& c : it.collectives)
      for (const std::string& name : c.params) EXPECT_FALSE(name.starts_with("fc1.")) << describe(c);
  }
}

// test_replicate_with_kwargs: bucket_cap_mb=1, gradient_as_bucket_view=True -> one 72-byte bucket;
// the bucket view changes memory, not collectives.
TEST(SeedReplicate, WithKwargs) {
  const PlanResult view = run_plan(
      "zoo:ReplicateNet", steps_plan(R"({"replicate":{"module":"","bucket_cap_mb":1,"gradient_as_bucket_view":true}})"));
  const PlanResult copy = run_plan("zoo:ReplicateNet", steps_plan(R"({"replicate":{"module":"","bucket_cap_mb":1}})"));
  for (const PlanResult* r : {&view, &copy}) {
    ASSERT_EQ(r->ddp.size(), 1u);
    EXPECT_EQ(bucket_bytes(r->ddp[0].initial), (V64{72}));
    EXPECT_EQ(bucket_bytes(r->ddp[0].rebuilt), (V64{72}));
    EXPECT_EQ(bucket_limits(r->ddp[0].rebuilt), (V64{kMiB}));
    for (const IterationRecord& it : r->iterations)
      EXPECT_EQ(bytes_of(select(it, op("c10d.allreduce_", kBackward))), (V64{72}));
  }
  EXPECT_EQ(view.memory.ddp_bucket_buffers, 0);
  EXPECT_EQ(copy.memory.ddp_bucket_buffers, 72);
  for (int it = 1; it <= 3; ++it) {
    const auto& a = iteration(view, it).collectives;
    const auto& b = iteration(copy, it).collectives;
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].op, b[i].op);
      EXPECT_EQ(a[i].bytes, b[i].bytes);
    }
  }
}

// test_replicate_device_id / test_replicate_wrong_device_id_type / move_args_kwargs_to_device.
TEST(SeedReplicate, DeviceId) {
  for (const char* id : {R"("cpu")", R"("cuda:0")", "0"})
    EXPECT_EQ(plan_error([&] {
                run_plan("zoo:ReplicateNet", steps_plan(std::string(R"({"replicate":{"module":"","device_id":)") + id + "}}"));
              }),
              "")
        << id;
  const std::string error = plan_error([] {
    run_plan("zoo:ReplicateNet", steps_plan(R"({"replicate":{"module":"","device_id":["cpu"]}})"));
  });
  EXPECT_NE(error.find("Expected device_id to be int or torch.device"), std::string::npos) << error;
  const PlanResult r = run_plan(
      model_from_json({{"name", "MyNet"}, {"modules", {{{"name", "a"}, {"type", "Linear"}, {"in_features", 2}, {"out_features", 2}}}}}),
      steps_plan(R"({"replicate":{"module":"","device_id":0}})"));
  EXPECT_EQ(bucket_bytes(r.ddp.at(0).initial), (V64{24}));
}

// ---------------------------------------------------------------------------------------------
// test_replicate_with_compiler.py.

// _test_bucketing: compiled DDP (python_reducer + Inductor fusion) -> ddp_buckets == 3.
TEST(SeedReplicateCompiler, Bucketing) {
  const PlanResult r = run_plan("zoo:Net", steps_plan(R"({"replicate":{"module":""}})"));
  const auto& compiled = r.ddp.at(0).compiled;
  ASSERT_EQ(compiled.size(), 3u);
  EXPECT_EQ(compiled[0].params, (Names{"fc4.bias", "fc4.weight"}));
  EXPECT_EQ(compiled[1].params, (Names{"fc3.bias", "fc3.weight", "fc2.bias", "fc2.weight"}));
  EXPECT_EQ(compiled[2].params, (Names{"fc1.bias", "fc1.weight"}));
  EXPECT_EQ(bucket_bytes(compiled), (V64{16008000, 32016000, 16008000}));
  // Reference vector 10's small case: 3 x Linear(2, 2) -> 1.
  const PlanResult small = run_plan("zoo:ReplicateNet", steps_plan(R"({"replicate":{"module":""}})"));
  EXPECT_EQ(small.ddp.at(0).compiled.size(), 1u);
}

// The boundary case of Inductor's `curr < threshold`: 3 x Linear(512, 512, bias=False), each weight
// exactly 1 MiB (512 * 512 * 4 B). Backward order c, b, a: c alone reaches the 1 MiB first threshold
// and closes bucket 0; b and a stay under the 25 MiB cap and the last block closes bucket 1.
TEST(SeedReplicateCompiler, AWeightOfExactlyOneMiBClosesTheFirstBucket) {
  nlohmann::json doc{{"name", "ThreeSquare"}, {"modules", nlohmann::json::array()}};
  for (const char* name : {"a", "b", "c"})
    doc["modules"].push_back(
        {{"name", name}, {"type", "Linear"}, {"in_features", 512}, {"out_features", 512}, {"bias", false}});
  const PlanResult r = run_plan(model_from_json(doc), steps_plan(R"({"replicate":{"module":""}})"));
  const auto& compiled = r.ddp.at(0).compiled;
  ASSERT_EQ(compiled.size(), 2u);
  EXPECT_EQ(compiled[0].params, (Names{"c.weight"}));
  EXPECT_EQ(compiled[1].params, (Names{"b.weight", "a.weight"}));
  EXPECT_EQ(bucket_bytes(compiled), (V64{1048576, 2097152}));
}

// Net(checkpoint=True): fc1 runs under checkpoint(use_reentrant=False). Recomputation adds compute,
// never collectives; the ready order (and so every bucket) is unchanged.
TEST(SeedReplicateCompiler, CheckpointedNetHasTheSameCollectives) {
  const std::string plan = steps_plan(R"({"replicate":{"module":""}})", 2, 4);
  const PlanResult plain = run_plan("zoo:Net", plan);
  const PlanResult checkpointed = run_plan("zoo:NetCheckpoint", plan);
  EXPECT_EQ(bucket_indices(checkpointed.ddp.at(0).rebuilt), bucket_indices(plain.ddp.at(0).rebuilt));
  EXPECT_EQ(checkpointed.ddp.at(0).compiled.size(), 3u);
  for (int it = 1; it <= 4; ++it) {
    const auto& a = iteration(plain, it).collectives;
    const auto& b = iteration(checkpointed, it).collectives;
    ASSERT_EQ(a.size(), b.size()) << it;
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].op, b[i].op);
      EXPECT_EQ(a[i].bytes, b[i].bytes);
      EXPECT_EQ(a[i].params, b[i].params);
    }
    EXPECT_GT(iteration(checkpointed, it).compute_flops, iteration(plain, it).compute_flops);
  }
  bool recompute = false;
  for (const ProgramOp& o : checkpointed.program.ops) recompute = recompute || o.phase == Phase::recompute;
  EXPECT_TRUE(recompute);
}

// DDP_TP_Test.test_ddp_tp (W = 4, mesh (2, 2) ["dp", "tp"]): see also vector 13.
TEST(SeedReplicateCompiler, DdpTpGroups) {
  const std::string plan =
      R"({"world_size":4,"mesh":{"shape":[2,2],"dim_names":["dp","tp"]},"iterations":3,"steps":[
          {"parallelize_module":{"module":"","mesh_dim":"tp","plan":{"fc1":"colwise","fc2":"rowwise","fc3":"colwise","fc4":"rowwise"}}},
          {"replicate":{"module":"","mesh_dim":"dp"}}]})";
  for (int rank = 0; rank < 4; ++rank) {
    const PlanResult r = run_plan("zoo:Net", plan, rank);
    for (const CollectiveRecord& c : iteration(r, 3).collectives) {
      const auto& ranks = r.group_ranks.at(static_cast<std::size_t>(c.group_id));
      if (c.group == "tp") {
        EXPECT_EQ(ranks, (std::vector<int>{2 * (rank / 2), 2 * (rank / 2) + 1}));
      } else {
        EXPECT_EQ(c.group, "dp");
        EXPECT_EQ(ranks, (std::vector<int>{rank % 2, rank % 2 + 2}));
      }
    }
    EXPECT_EQ(training_counts(iteration(r, 3)), (Counts{{"c10d.allreduce_", 2}, {"c10d_functional.all_reduce", 3}}));
  }
}

// ---------------------------------------------------------------------------------------------
// test_fsdp_tp_integration.py.

// test_fsdp_tp_extension_grad: CommDebugMode total 7 (vector 12 has the details).
TEST(SeedFsdpTp, ExtensionGradCounts) {
  const PlanResult r = run_plan(
      "zoo:TestModel",
      R"J({"world_size":4,"mesh":{"shape":[2,2],"dim_names":["dp","tp"]},"batch_size":2,"iterations":1,"steps":[
          {"parallelize_module":{"module":"","mesh_dim":"tp","plan":{
              "mlp.net1":{"style":"colwise","input_layouts":"Shard(0)"},
              "mlp.net2":{"style":"rowwise","output_layouts":"Shard(0)"}}}},
          {"distribute_module":{"module":"mlp_norm","mesh_dim":"tp","input_layouts":"Shard(0)"}},
          {"fully_shard":{"module":"","mesh_dim":"dp"}}]})J");
  int total = 0;
  for (const auto& [key, n] : r.counts()) total += n;
  EXPECT_EQ(total, 7);
  EXPECT_EQ(r.counts(), (Counts{{"c10d_functional.reduce_scatter_tensor", 2},
                                {"c10d_functional.all_gather_into_tensor", 2},
                                {"c10d_functional.all_reduce", 1},
                                {"c10d._allgather_base_", 1},
                                {"c10d._reduce_scatter_base_", 1}}));
}

// _test_fsdp_tp_integration (upstream body; the seed elides it): SimpleModel, sequence-parallel
// plan net1 Colwise(Shard(0)) / net2 Rowwise(output Shard(0)), FSDP over dp (W = 4, tp = 2), input
// [2, 3, 5]. _sync_tp_grads splits the unsharded flat parameter (S x dp) into the per-parameter
// local numels 20 + 4 + 16 + 4 + 48 + 12 = 104: no padding, with or without use_orig_params.
TEST(SeedFsdpTp, IntegrationFlatParameter) {
  for (const char* strategy : {"FULL_SHARD", "SHARD_GRAD_OP"})
    for (const char* orig : {"false", "true"}) {
      SCOPED_TRACE(std::string(strategy) + " use_orig_params=" + orig);
      const PlanResult r = run_plan(
          "zoo:SimpleModel",
          std::string(R"J({"world_size":4,"mesh":{"shape":[2,2],"dim_names":["dp","tp"]},"batch_size":2,"seq_len":3,)J"
                      R"J("iterations":2,"steps":[{"parallelize_module":{"module":"","mesh_dim":"tp","plan":{)J"
                      R"J("net1":{"style":"colwise","input_layouts":"Shard(0)"},"net2":{"style":"rowwise","output_layouts":"Shard(0)"}}}},)J"
                      R"J({"fully_shard":{"module":"","mesh_dim":"dp","strategy":")J") +
              strategy + R"J(","use_orig_params":)J" + orig + "}}]}");
      ASSERT_EQ(r.fsdp.size(), 1u);
      EXPECT_EQ(r.fsdp[0].numel, 104);
      EXPECT_EQ(r.fsdp[0].shard_numel, 52);
      EXPECT_EQ(r.fsdp[0].params, (Names{"net1.weight", "net1.bias", "net2.weight", "net2.bias", "net3.weight", "net3.bias"}));
      // Root unit: one gather, one reduce-scatter. TP: net1 input gather (forward), net2 output
      // reduce-scatter (forward), net2 output-gradient gather (backward); net1's input needs no grad.
      EXPECT_EQ(counts_of(iteration(r, 2)), (Counts{{"c10d._allgather_base_", 1},
                                                     {"c10d._reduce_scatter_base_", 1},
                                                     {"c10d_functional.all_gather_into_tensor", 2},
                                                     {"c10d_functional.reduce_scatter_tensor", 1}}))
          << describe(iteration(r, 2));
    }
}

// test_fsdp_tp_sync_module_state: FSDP(sync_module_states=True) over dp broadcasts the module
// state from the dp group's first rank once, at construction.
TEST(SeedFsdpTp, SyncModuleState) {
  const Model model = model_from_json({{"name", "TestModel"}, {"input_features", 8}, {"parameters", {{{"name", "param"}, {"shape", {8, 8}}}}}});
  const PlanResult r = run_plan(
      model, R"({"world_size":4,"mesh":{"shape":[2,2],"dim_names":["dp","tp"]},"iterations":2,"steps":[
                 {"fully_shard":{"module":"","mesh_dim":"dp","sync_module_states":true}}]})");
  const auto broadcasts = select(iteration(r, 1), op("c10d.broadcast_", kInit));
  ASSERT_EQ(broadcasts.size(), 1u) << describe(r);
  EXPECT_EQ(broadcasts[0].group, "dp");
  EXPECT_EQ(broadcasts[0].params, (Names{"param"}));
  // (The model format has no buffers; PyTorch's broadcast also carries `buf`.)
  EXPECT_TRUE(select(iteration(r, 2), op("c10d.broadcast_")).empty());
}

// ---------------------------------------------------------------------------------------------
// test_data_parallel.py: the DDP baseline of SimpleMLP (W = 2, batch 128) and the optimizer state
// each mode keeps (pytorch-semantics.md §9).

TEST(SeedDataParallel, SimpleMlpBaselineAndOptimizerState) {
  const std::int64_t bytes = (50 * 32 + 32 + 32 * 8 + 8) * 4;  // 7,584 B
  auto plan = [](const std::string& step, const std::string& optimizer) {
    return R"({"world_size":2,"batch_size":128,"iterations":2,"optimizer":)" + optimizer + R"(,"steps":[)" + step + "]}";
  };
  const std::string replicate = R"({"replicate":{"module":""}})";
  const std::string fully_shard = R"({"fully_shard":{"module":""}})";
  {
    const PlanResult r = run_plan("zoo:SimpleMLP", plan(replicate, R"({"type":"sgd","lr":0.1})"));
    EXPECT_EQ(bucket_bytes(r.ddp.at(0).initial), (V64{bytes}));
    EXPECT_EQ(bucket_indices(r.ddp.at(0).rebuilt), (std::vector<std::vector<int>>{{3, 2, 1, 0}}));
    EXPECT_EQ(bytes_of(select(iteration(r, 2), op("c10d.allreduce_", kBackward))), (V64{bytes}));
    EXPECT_EQ(r.memory.optimizer_state, 0);
  }
  EXPECT_EQ(run_plan("zoo:SimpleMLP", plan(replicate, R"({"type":"sgd","lr":0.1,"momentum":0.9})")).memory.optimizer_state,
            bytes);
  // Adam: exp_avg and exp_avg_sq per element (its `step` counters live on the CPU when not fused).
  EXPECT_EQ(run_plan("zoo:SimpleMLP", plan(replicate, R"({"type":"adam","lr":0.1})")).memory.optimizer_state, 2 * bytes);
  {
    // FSDP: the optimizer sees the S-element shard (N = 1896, S = 948).
    const PlanResult r = run_plan("zoo:SimpleMLP", plan(fully_shard, R"({"type":"adam","lr":0.1})"));
    EXPECT_EQ(r.fsdp.at(0).shard_numel, 948);
    EXPECT_EQ(r.memory.optimizer_state, 2 * 948 * 4);
  }
}
