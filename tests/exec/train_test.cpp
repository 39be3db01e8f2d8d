// Training for real through the program, ranks as threads over Gloo, checked against
// single-process training on the global batch: the seed scenarios (replicate, fully_shard with
// SGD/momentum/Adam, FSDP + TP, DDP + TP, ignored modules), every FSDP sharding strategy, HSDP,
// gradient accumulation, checkpointing and the compress hooks. Mutated programs must fail.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "stratsim/core/errors.hpp"
#include "stratsim/core/json_reader.hpp"
#include "stratsim/core/model_io.hpp"
#include "stratsim/core/plan.hpp"
#include "stratsim/core/planner.hpp"
#include "stratsim/exec/backend.hpp"
#include "stratsim/exec/train.hpp"
#include "train_support.hpp"

namespace stratsim::test {
namespace {

// Parity: every rank finished, every parameter within tolerance, replicas identical, and the
// distributed loss equals the local one.
void expect_parity(const Outcome& outcome, double loss_rtol = 1e-5) {
  for (const RankError& error : outcome.errors) ASSERT_EQ(error.message, "");
  const exec::TrainingSummary& s = outcome.summary;
  EXPECT_TRUE(s.passed) << exec::training_text(s);
  for (const auto& p : s.params) {
    EXPECT_EQ(p.mismatches, 0) << p.fqn;
    EXPECT_TRUE(p.replicas_identical) << p.fqn;
    EXPECT_LT(p.max_abs_diff, 1e-5) << p.fqn;
    EXPECT_GT(p.max_abs_reference, 0) << p.fqn;  // a real value was compared
  }
  ASSERT_EQ(s.reference_loss.size(), s.distributed_loss.size());
  for (std::size_t i = 0; i < s.reference_loss.size(); ++i)
    EXPECT_NEAR(s.distributed_loss[i], s.reference_loss[i], loss_rtol * s.reference_loss[i]) << "step " << i + 1;
}

// Adam divides each element's update by its gradient's running magnitude, so an element whose
// gradient nearly cancels (|g| near eps) turns last-bit differences of summation order into
// update differences up to lr: parameters can differ by ~1e-5 after a few steps at lr 0.01 while
// the losses agree to 1e-8 (SGD on the same cases: 1e-8). PyTorch's Adam parity tests
// (test_compose.py _test_parity) compare losses; so does this (and the report's "losses"
// criterion), plus bit-identical replicas and parameters within 1e-3. Adam is nearly
// scale-invariant, so these runs cannot catch a wrong averaging factor: the SGD runs beside them do.
void expect_adam_parity(const Outcome& outcome) {
  for (const RankError& error : outcome.errors) ASSERT_EQ(error.message, "");
  const exec::TrainingSummary& s = outcome.summary;
  EXPECT_TRUE(s.passed) << exec::training_text(s);
  EXPECT_NE(s.criterion, "replicas");
  for (const auto& p : s.params) {
    EXPECT_TRUE(p.replicas_identical) << p.fqn;
    EXPECT_LT(p.max_abs_diff, 1e-3) << p.fqn;
  }
  ASSERT_EQ(s.reference_loss.size(), s.distributed_loss.size());
  for (std::size_t i = 0; i < s.reference_loss.size(); ++i)
    EXPECT_NEAR(s.distributed_loss[i], s.reference_loss[i], 1e-6 * s.reference_loss[i]) << "step " << i + 1;
}

// Local training moves the parameters: parity is not trivially met by a model that never trains.
void expect_training_moved(const exec::TrainingSummary& s) {
  ASSERT_GE(s.reference_loss.size(), 2u);
  EXPECT_NE(s.reference_loss.front(), s.reference_loss.back());
}

// ---- seed 003 (test_replicate.py): replicate on one or several modules, ignored modules.

TEST(TrainReplicate, SingleModuleMatchesLocalTraining) {
  const Outcome outcome = train_spec("zoo:ReplicateNet", R"({"world_size": 2, "batch_size": 1, "iterations": 3,
      "optimizer": {"type": "sgd", "lr": 1.0}, "steps": [{"replicate": {"module": ""}}]})");
  expect_parity(outcome);
  expect_training_moved(outcome.summary);
  EXPECT_EQ(outcome.summary.global_rows, 2);
  EXPECT_EQ(outcome.summary.collectives.at("c10d.allreduce_"), 3);  // one 72 B bucket per iteration
}

TEST(TrainReplicate, MultiModuleMatchesLocalTraining) {
  const Outcome outcome = train_spec("zoo:ReplicateNet", R"({"world_size": 2, "batch_size": 1, "iterations": 2,
      "optimizer": {"type": "sgd", "lr": 1.0},
      "steps": [{"replicate": {"module": "fc1"}}, {"replicate": {"module": "fc2"}}, {"replicate": {"module": "fc3"}}]})");
  expect_parity(outcome);
}

TEST(TrainReplicate, IgnoredModuleStaysUnsynchronised) {
  const Outcome outcome = train_spec("zoo:ReplicateNet", R"({"world_size": 2, "batch_size": 3, "iterations": 2,
      "steps": [{"replicate": {"module": "", "ignored_modules": ["fc1"]}}]})");
  for (const RankError& error : outcome.errors) ASSERT_EQ(error.message, "");
  const exec::TrainingSummary& s = outcome.summary;
  EXPECT_TRUE(s.passed) << exec::training_text(s);
  for (const auto& p : s.params) {
    const bool ignored = p.fqn.starts_with("fc1.");
    EXPECT_EQ(p.synchronised, !ignored) << p.fqn;
    EXPECT_EQ(p.replicas_identical, !ignored) << p.fqn;  // fc1 differs per rank, fc2/fc3 agree bit for bit
  }
}

// ---- seed 001 (test_data_parallel.py): SimpleMLP, batch 128, SGD (momentum) and Adam.

TEST(TrainReplicate, SimpleMlpSgdMomentumAndAdam) {
  for (const char* optimizer :
       {R"({"type": "sgd", "lr": 0.1})", R"({"type": "sgd", "lr": 0.1, "momentum": 0.9})",
        R"({"type": "adam", "lr": 0.1})", R"({"type": "adamw", "lr": 0.01, "weight_decay": 0.1})"}) {
    SCOPED_TRACE(optimizer);
    const Outcome outcome = train_spec(
        "zoo:SimpleMLP", std::string(R"({"world_size": 2, "batch_size": 64, "iterations": 3, "optimizer": )") +
                             optimizer + R"(, "steps": [{"replicate": {"module": ""}}]})");
    expect_parity(outcome);
    expect_training_moved(outcome.summary);
  }
}

TEST(TrainFullyShard, SimpleMlpEveryStrategyAndOptimizer) {
  for (const char* strategy : {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"})
    for (const char* optimizer : {R"({"type": "sgd", "lr": 0.1, "momentum": 0.9})", R"({"type": "adam", "lr": 0.1})"}) {
      SCOPED_TRACE(std::string(strategy) + " " + optimizer);
      const Outcome outcome =
          train_spec("zoo:SimpleMLP",
                     std::string(R"({"world_size": 2, "batch_size": 64, "iterations": 3, "optimizer": )") + optimizer +
                         R"(, "steps": [{"fully_shard": {"module": "", "strategy": ")" + strategy + R"("}}]})");
      expect_parity(outcome);
    }
}

TEST(TrainFullyShard, WrappedUnitsOnFourRanksWithOrigParams) {
  // Several units and a root without a handle; ReplicateNet's Linear(2, 2) units are uneven
  // (6 elements, or 8 with use_orig_params alignment, over 4 ranks: padded shards).
  for (auto [model, units] : {std::pair{"zoo:CompositeModel", 8}, std::pair{"zoo:ReplicateNet", 3}})
    for (const char* orig : {"false", "true"}) {
      SCOPED_TRACE(std::string(model) + " use_orig_params " + orig);
      const Outcome outcome = train_spec(model, std::string(R"({"world_size": 4, "batch_size": 2, "iterations": 3,
          "optimizer": {"type": "sgd", "lr": 0.1, "momentum": 0.9},
          "steps": [{"fully_shard": {"module": "", "policy": {"module_types": ["Linear"]}, "use_orig_params": )") +
                                                    orig + "}}]}");
      expect_parity(outcome);
      EXPECT_EQ(outcome.summary.state_dict_all_gathers, units);  // one per unit with parameters
    }
}

TEST(TrainFullyShard, HybridShardOverA2x2Mesh) {
  const Outcome outcome = train_spec("zoo:SimpleMLP", R"({"world_size": 4, "batch_size": 8, "iterations": 3,
      "mesh": {"shape": [2, 2], "dim_names": ["replicate", "shard"]}, "optimizer": {"type": "sgd", "lr": 0.1},
      "steps": [{"fully_shard": {"module": "", "mesh_dim": ["replicate", "shard"], "strategy": "HYBRID_SHARD"}}]})");
  expect_parity(outcome);
  EXPECT_EQ(outcome.summary.global_rows, 32);
}

TEST(TrainFullyShard, CheckpointedUnitsMatchLocalTraining) {
  const Outcome outcome = train_spec("zoo:CompositeModel", R"({"world_size": 2, "batch_size": 4, "iterations": 2,
      "steps": [{"checkpoint": {"module": "u1"}}, {"checkpoint": {"module": "u2"}},
                {"fully_shard": {"module": "u1"}}, {"fully_shard": {"module": "u2"}}, {"fully_shard": {"module": ""}}]})");
  expect_parity(outcome);
}

// ---- seed 002 (test_compose.py): replicate and fully_shard composed, checkpointed submodules

TEST(TrainCompose, FullyShardReplicateComposability) {
  // _test_replicate_in_fully_shard's configs, bottom-up: r = replicate, f = fully_shard,
  // m = manual wrap, a = auto wrap (ModuleWrapPolicy({UnitModule})).
  const std::vector<std::pair<std::string, std::string>> configs = {
      {"zoo:CompositeModel", R"([{"fully_shard": {"module": "l1"}}, {"replicate": {"module": ""}}])"},       // 1fm,1r
      {"zoo:CompositeParamModel", R"([{"replicate": {"module": "u1"}}, {"fully_shard": {"module": ""}}])"},  // 1r,1fm
      {"zoo:CompositeParamModel", R"([{"replicate": {"module": "u1"}},
          {"fully_shard": {"module": "", "policy": {"module_types": ["UnitModule"]}}}])"},                   // 1r,1fa
      {"zoo:CompositeParamModel", R"([{"replicate": {"module": "u1"}}, {"fully_shard": {"module": "u2"}},
          {"fully_shard": {"module": ""}}])"},  // 1r1fm,1fm
      {"zoo:CompositeParamModel", R"([{"replicate": {"module": "u1"}},
          {"fully_shard": {"module": "u2", "policy": {"module_types": ["UnitModule"]}}},
          {"fully_shard": {"module": ""}}])"},  // 1r1fa,1fm
      {"zoo:CompositeParamModel", R"([{"fully_shard": {"module": "u1.seq"}}, {"fully_shard": {"module": "u2.seq"}},
          {"replicate": {"module": "u1"}}, {"replicate": {"module": "u2"}}, {"fully_shard": {"module": ""}}])"},  // 1fm1fm,1r1r,1fm
  };
  for (const auto& [model, steps] : configs) {
    SCOPED_TRACE(model + " " + steps);
    // SGD with momentum: every parameter within 1e-5 of local training.
    expect_parity(train_spec(model, R"({"world_size": 2, "batch_size": 2, "iterations": 5,
        "optimizer": {"type": "sgd", "lr": 0.1, "momentum": 0.9}, "steps": )" +
                                        steps + "}"));
    // The seed's Adam(lr=0.01), checked as the seed checks it (see expect_adam_parity).
    expect_adam_parity(train_spec(model, R"({"world_size": 2, "batch_size": 2, "iterations": 5,
        "optimizer": {"type": "adam", "lr": 0.01}, "steps": )" +
                                             steps + "}"));
  }
}

TEST(TrainCompose, CheckpointedSubmodulesWithParam) {
  // test_checkpoint_fsdp_submodules_with_param(_no_shard): checkpoint(u1.seq), checkpoint(u2.seq),
  // fully_shard(model), 5 steps; the seed's Adam(lr=0.01) and SGD with momentum.
  for (const char* strategy : {"FULL_SHARD", "NO_SHARD"})
    for (const bool adam : {false, true}) {
      SCOPED_TRACE(std::string(strategy) + (adam ? " adam" : " sgd"));
      const std::string optimizer =
          adam ? R"({"type": "adam", "lr": 0.01})" : R"({"type": "sgd", "lr": 0.1, "momentum": 0.9})";
      const Outcome outcome =
          train_spec("zoo:CompositeParamModel",
                     R"({"world_size": 2, "batch_size": 2, "iterations": 5, "optimizer": )" + optimizer +
                         R"(, "steps": [{"checkpoint": {"module": "u1.seq"}}, {"checkpoint": {"module": "u2.seq"}},
              {"fully_shard": {"module": "", "strategy": ")" +
                         strategy + R"("}}]})");
      if (adam) expect_adam_parity(outcome);
      else expect_parity(outcome);
    }
}

// ---- gradient accumulation (no_sync for the first k-1 of every k micro-steps)

TEST(TrainAccumulation, ReplicateAndShardGradOpAccumulateLikeLocal) {
  for (const char* step :
       {R"({"replicate": {"module": ""}})", R"({"fully_shard": {"module": "", "strategy": "SHARD_GRAD_OP"}})",
        R"({"fully_shard": {"module": "", "strategy": "FULL_SHARD"}})"}) {
    SCOPED_TRACE(step);
    const Outcome outcome =
        train_spec("zoo:SimpleMLP", std::string(R"({"world_size": 2, "batch_size": 4, "iterations": 4,
            "gradient_accumulation_steps": 2, "optimizer": {"type": "sgd", "lr": 0.5, "momentum": 0.9},
            "steps": [)") + step + "]}");
    expect_parity(outcome);
    EXPECT_EQ(outcome.summary.optimizer_steps_after, (std::vector<int>{2, 4}));
  }
}

// ---- FSDP2 (torch.distributed.fsdp.fully_shard): per-parameter Shard(0) rows

TEST(TrainFullyShard2, NestedGroupsUnevenRowsAndEveryReshardChoice) {
  // Three ranks: every weight's dim 0 is padded (32, 8, 4 rows over 3 ranks); net1 keeps its
  // parameters after forward, the root is its own group; SGD with momentum catches a wrong average.
  const Outcome outcome = train_spec("zoo:SimpleMLP", R"({"world_size": 3, "batch_size": 2, "iterations": 3,
      "torch_version": "2.15", "optimizer": {"type": "sgd", "lr": 0.5, "momentum": 0.9},
      "steps": [{"torch.distributed.fsdp.fully_shard": {"module": "net1", "reshard_after_forward": false}},
                {"torch.distributed.fsdp.fully_shard": {"module": "net2"}},
                {"torch.distributed.fsdp.fully_shard": {"module": ""}}]})");
  expect_parity(outcome);
  expect_training_moved(outcome.summary);
  EXPECT_EQ(outcome.summary.collectives.at("c10d._reduce_scatter_base_"), 6);  // net1 and net2, 3 steps
}

TEST(TrainFullyShard2, ReshardAfterForwardToRunsOfRanksMatchesLocalTraining) {
  // Six ranks: net1 keeps a third of its (padded) parameters after forward and re-gathers them
  // over runs of 3 ranks, net2 a half over runs of 2; the pieces are other ranks' shards.
  const Outcome outcome = train_spec("zoo:SimpleMLP", R"({"world_size": 6, "batch_size": 2, "iterations": 2,
      "torch_version": "2.15", "optimizer": {"type": "sgd", "lr": 0.5, "momentum": 0.9},
      "steps": [{"torch.distributed.fsdp.fully_shard": {"module": "net1", "reshard_after_forward": 3}},
                {"torch.distributed.fsdp.fully_shard": {"module": "net2", "reshard_after_forward": 2}},
                {"torch.distributed.fsdp.fully_shard": {"module": ""}}]})");
  expect_parity(outcome);
  expect_training_moved(outcome.summary);
  // Per step: net1 and net2 gather in forward and again, over their runs, in backward (the root's
  // group has no parameters left: the sigmoid is functional).
  EXPECT_EQ(outcome.summary.collectives.at("c10d._allgather_base_"), 8);
}

TEST(TrainFullyShard2, HsdpWithAccumulationMatchesLocalTraining) {
  const Outcome outcome = train_spec("zoo:SimpleMLP", R"({"world_size": 4, "batch_size": 2, "iterations": 4,
      "mesh": {"shape": [2, 2], "dim_names": ["replicate", "shard"]}, "gradient_accumulation_steps": 2,
      "torch_version": "2.15", "optimizer": {"type": "sgd", "lr": 0.5},
      "steps": [{"torch.distributed.fsdp.fully_shard": {"module": "", "mesh_dim": ["replicate", "shard"]}}]})");
  expect_parity(outcome);
  EXPECT_EQ(outcome.summary.optimizer_steps_after, (std::vector<int>{2, 4}));
}

TEST(TrainFullyShard2, OverTensorParallelMatchesLocalTraining) {
  const Outcome outcome = train_spec("zoo:MLPModule", R"({"world_size": 4, "batch_size": 2, "iterations": 2,
      "mesh": {"shape": [2, 2], "dim_names": ["dp", "tp"]}, "input_requires_grad": true, "torch_version": "2.15",
      "steps": [{"parallelize_module": {"mesh_dim": "tp", "plan": {"net1": "colwise", "net2": "rowwise"}}},
                {"torch.distributed.fsdp.fully_shard": {"module": "", "mesh_dim": "dp"}}]})");
  expect_parity(outcome);
}

TEST(TrainFullyShard2, AGroupLeftWithoutParametersTrains) {
  // The root's fully_shard over "x" finds every parameter taken by net1's and net2's groups over
  // "dp": an empty group, on a mesh dim no collective uses.
  const Outcome outcome = train_spec("zoo:SimpleMLP", R"({"world_size": 4, "batch_size": 2, "iterations": 2,
      "mesh": {"shape": [2, 2], "dim_names": ["dp", "x"]}, "torch_version": "2.15",
      "steps": [{"torch.distributed.fsdp.fully_shard": {"module": "net1", "mesh_dim": "dp"}},
                {"torch.distributed.fsdp.fully_shard": {"module": "net2", "mesh_dim": "dp"}},
                {"torch.distributed.fsdp.fully_shard": {"module": "", "mesh_dim": "x"}}]})");
  for (const RankError& error : outcome.errors) ASSERT_EQ(error.message, "");
  EXPECT_TRUE(outcome.summary.passed) << exec::training_text(outcome.summary);
}

TEST(TrainMutation, Fsdp2GatherThatSkipsARankBreaksParity) {
  // The all-gather's bytes still move, but the group's rows are not written back.
  const Outcome outcome = train_spec("zoo:SimpleMLP",
                                     R"({"world_size": 2, "batch_size": 8, "iterations": 2, "torch_version": "2.15",
          "steps": [{"torch.distributed.fsdp.fully_shard": {"module": ""}}]})",
                                     [](core::PlanResult& planned) {
                                       for (core::ProgramOp& op : planned.program.ops)
                                         if (op.role == core::OpRole::fsdp_unshard && op.iteration == 2) {
                                           op.role = core::OpRole::ddp_used_map;
                                           op.kind = core::CollectiveKind::all_reduce;
                                         }
                                     });
  for (const RankError& error : outcome.errors) ASSERT_EQ(error.message, "");
  EXPECT_FALSE(outcome.summary.passed);
}

// ---- sequence parallelism: [batch, seq, features] activations sharded on the sequence

// torchtitan's block: SequenceParallel norms, Colwise in from Shard(1), Rowwise out to Shard(1),
// on a tp dim under FSDP2 over dp. The norms' Replicate weights get Partial gradients (each rank
// saw its positions only), all-reduced before FSDP2's reduce-scatter.
const char* const kSequenceBlock = STRATSIM_TEST_DATA "/sequence_block.json";

std::string sequence_parallel_plan(const std::string& extra_steps = "") {
  return R"J({"world_size": 4, "batch_size": 2, "iterations": 3, "torch_version": "2.15",
      "mesh": {"shape": [2, 2], "dim_names": ["dp", "tp"]}, "optimizer": {"type": "sgd", "lr": 0.5, "momentum": 0.9},
      "steps": [{"parallelize_module": {"mesh_dim": "tp", "plan": {
                   "norm0": "sequence_parallel",
                   "fc_in": {"style": "colwise", "input_layouts": "Shard(1)"},
                   "fc_out": {"style": "rowwise", "output_layouts": "Shard(1)"},
                   "norm1": "sequence_parallel",
                   "head": {"style": "colwise", "input_layouts": "Shard(1)"}}}})J" +
         extra_steps + "]}";
}

TEST(TrainSequenceParallel, TorchtitanStyleBlockUnderFsdp2MatchesLocalTraining) {
  const Outcome outcome = train_spec(
      kSequenceBlock,
      sequence_parallel_plan(R"(, {"torch.distributed.fsdp.fully_shard": {"module": "", "mesh_dim": "dp"}})"));
  expect_parity(outcome);
  expect_training_moved(outcome.summary);
  // Per step: gathers before fc_in and head, reduce-scatters after fc_out and for two input
  // gradients, one gather for fc_out's output gradient; the norms' three Partial gradients.
  EXPECT_EQ(outcome.summary.collectives.at("c10d_functional.all_gather_into_tensor"), 9);
  EXPECT_EQ(outcome.summary.collectives.at("c10d_functional.reduce_scatter_tensor"), 9);
  EXPECT_EQ(outcome.summary.collectives.at("c10d_functional.all_reduce"), 9);
}

TEST(TrainSequenceParallel, TensorParallelOnlyWithAccumulation) {
  // No data parallelism: the norms' Partial gradients are summed at the optimizer step, over two
  // micro-steps each.
  std::string plan = sequence_parallel_plan();
  plan.replace(plan.find(R"("world_size": 4)"), 15, R"("world_size": 2)");
  plan.replace(plan.find(R"("shape": [2, 2])"), 15, R"("shape": [1, 2])");
  plan.replace(plan.find(R"("iterations": 3)"), 15, R"("iterations": 4, "gradient_accumulation_steps": 2)");
  const Outcome outcome = train_spec(kSequenceBlock, plan);
  expect_parity(outcome);
  EXPECT_EQ(outcome.summary.optimizer_steps_after, (std::vector<int>{2, 4}));
}

TEST(TrainSequenceParallel, PrepareModuleInputAndOutputWithDTensorsBetweenModules) {
  // PrepareModuleOutput gathers the activation's features after fc_in, so fc_out takes a
  // Replicate input (a free chunk); fc_out's output stays a DTensor (use_local_output false) into
  // the SequenceParallel norm; PrepareModuleInput hands the plain head replicated rows.
  const Outcome outcome = train_spec(kSequenceBlock, R"J({"world_size": 2, "batch_size": 3, "iterations": 2,
      "torch_version": "2.15", "mesh": {"shape": [2], "dim_names": ["tp"]},
      "steps": [{"parallelize_module": {"mesh_dim": "tp", "plan": {
                   "norm0": "sequence_parallel",
                   "fc_in": {"style": "colwise", "input_layouts": "Shard(1)"},
                   "act": {"style": "prepare_output", "output_layouts": "Shard(-1)",
                           "desired_output_layouts": "Replicate()"},
                   "fc_out": {"style": "rowwise", "input_layouts": "Replicate()", "output_layouts": "Shard(1)",
                              "use_local_output": false},
                   "norm1": "sequence_parallel",
                   "head": {"style": "prepare_input", "input_layouts": "Shard(1)",
                            "desired_input_layouts": "Replicate()", "use_local_output": true}}}}]})J");
  expect_parity(outcome);
}

TEST(TrainMutation, UnreducedPartialNormGradientsBreakParity) {
  // The norms' Partial gradient all-reduces move their bytes but sum nothing: each tp rank steps
  // with the gradient of its own positions.
  const Outcome outcome = train_spec(
      kSequenceBlock,
      sequence_parallel_plan(R"(, {"torch.distributed.fsdp.fully_shard": {"module": "", "mesh_dim": "dp"}})"),
      [](core::PlanResult& planned) {
        for (core::ProgramOp& op : planned.program.ops)
          if (op.role == core::OpRole::tp_param_grad) op.role = core::OpRole::ddp_used_map;
      });
  for (const RankError& error : outcome.errors) ASSERT_EQ(error.message, "");
  EXPECT_FALSE(outcome.summary.passed);
}

TEST(TrainSequenceParallel, AnUnevenSequenceIsRefused) {
  // A replicated input of 3 positions, reduce-scattered onto the sequence over 2 ranks. (A
  // sequence-sharded input is each rank's own positions: it always splits evenly.)
  const Outcome outcome = train_spec(kSequenceBlock, R"J({"world_size": 2, "batch_size": 2, "seq_len": 3,
      "torch_version": "2.15", "iterations": 1, "mesh": {"shape": [2], "dim_names": ["tp"]},
      "steps": [{"parallelize_module": {"mesh_dim": "tp", "plan": {
                   "fc_in": "colwise", "fc_out": {"style": "rowwise", "output_layouts": "Shard(1)"},
                   "norm1": "sequence_parallel", "head": {"style": "colwise", "input_layouts": "Shard(1)"}}}}]})J");
  ASSERT_EQ(outcome.errors[0].kind, ErrorKind::input) << outcome.errors[0].message;
  EXPECT_NE(outcome.errors[0].message.find("splits a sequence of 3 positions over 2 ranks; --train needs even shards"),
            std::string::npos)
      << outcome.errors[0].message;
}

// ---- tensor parallelism (seeds 000 and 004)

TEST(TrainTensorParallel, DdpTpMatchesLocalTraining) {
  // DDP_TP_Test's plan (fc1/fc3 Colwise, fc2/fc4 Rowwise, replicate over dp) on a narrow Net.
  const Outcome outcome = train_spec("zoo:Net:dim=16", "builtin:ddp-tp");
  expect_parity(outcome);
  EXPECT_EQ(outcome.summary.collectives.at("c10d_functional.all_reduce"), 9);  // 3 per iteration
}

TEST(TrainTensorParallel, FsdpTpExtensionMatchesLocalTraining) {
  // test_fsdp_tp_extension_grad: sequence-sharded input, RMSNorm with a Partial weight gradient.
  const Outcome outcome = train_spec("zoo:TestModel", "builtin:fsdp-tp");
  expect_parity(outcome);
  EXPECT_EQ(outcome.summary.global_rows, 8);  // 2 rows per rank, 4 per tp group, 2 dp replicas
}

TEST(TrainTensorParallel, OutputLayoutsAndReplicatedInputs) {
  // Colwise with Replicate output (all-gather of the last dim), Rowwise fed a Replicate input
  // (local chunk, all-gather in backward), and a colwise last layer with a Shard(-1) output.
  const Outcome outcome = train_spec("zoo:SimpleModel", R"({"world_size": 2, "batch_size": 4, "iterations": 2,
      "input_requires_grad": true, "optimizer": {"type": "adam", "lr": 0.05},
      "mesh": {"shape": [2], "dim_names": ["tp"]},
      "steps": [{"parallelize_module": {"module": "", "mesh_dim": "tp",
                 "plan": {"net1": {"style": "colwise", "output_layouts": "Replicate"},
                          "net2": {"style": "rowwise", "input_layouts": "Replicate"},
                          "net3": "colwise"}}}]})");
  expect_parity(outcome);
}

TEST(TrainTensorParallel, ShardToShardByAllToAllAndByAllGatherBefore24) {
  // Colwise output Shard(1) -> Shard(0), Rowwise input Shard(0) -> Shard(1): one all-to-all per move
  // from PyTorch 2.4, an all-gather and a local chunk in 2.3. Both must train like local training.
  for (const char* version : {"2.4", "2.3"}) {
    SCOPED_TRACE(version);
    const std::string plan = std::string(R"J({"world_size": 2, "batch_size": 4, "iterations": 2,
        "input_requires_grad": true, "torch_version": ")J") +
                             version + R"J(", "mesh": {"shape": [2], "dim_names": ["tp"]},
        "steps": [{"parallelize_module": {"module": "", "mesh_dim": "tp",
                   "plan": {"net1": {"style": "colwise", "output_layouts": "Shard(0)"},
                            "net2": {"style": "rowwise", "input_layouts": "Shard(0)"}}}}]})J";
    const Outcome outcome = train_spec("zoo:SimpleModel", plan);
    expect_parity(outcome);
    const auto& counts = outcome.summary.collectives;
    if (std::string(version) == "2.4") EXPECT_EQ(counts.at("_dtensor.shard_dim_alltoall"), 8);  // 4 per iteration
    else EXPECT_EQ(counts.count("_dtensor.shard_dim_alltoall"), 0u);
  }
}

// ---- compress hooks: 16-bit gradients, within those dtypes' tolerance

TEST(TrainReplicate, CompressHooksWithinTheirTolerance) {
  for (auto [hook, rtol] : {std::pair{"fp16_compress", 1e-3}, std::pair{"bf16_compress", 1.6e-2}}) {
    SCOPED_TRACE(hook);
    exec::TrainOptions options;
    options.rtol = rtol;
    const Outcome outcome = train_spec("zoo:SimpleMLP",
                                       std::string(R"({"world_size": 2, "batch_size": 16, "iterations": 2,
            "steps": [{"replicate": {"module": "", "comm_hook": ")") +
                                           hook + R"("}}]})",
                                       {}, options);
    expect_parity(outcome, rtol);
    bool inexact = false;  // the rounding is real: some parameter is not bit-equal to fp32 training
    for (const auto& p : outcome.summary.params) inexact = inexact || p.max_abs_diff > 0;
    EXPECT_TRUE(inexact);
  }
}

// ---- mutated programs must fail the check

TEST(TrainMutation, ParameterMissingFromABucketBreaksParity) {
  const Outcome outcome =
      train_spec("zoo:SimpleMLP",
                 R"({"world_size": 2, "batch_size": 8, "iterations": 2, "steps": [{"replicate": {"module": ""}}]})",
                 [](core::PlanResult& planned) {
                   for (core::ProgramOp& op : planned.program.ops)
                     if (op.role == core::OpRole::ddp_bucket) std::erase(op.params, "net1.weight");
                 });
  for (const RankError& error : outcome.errors) ASSERT_EQ(error.message, "");
  EXPECT_FALSE(outcome.summary.passed);
  for (const auto& p : outcome.summary.params)
    if (p.fqn == "net1.weight") {
      EXPECT_GT(p.mismatches, 0);
      EXPECT_FALSE(p.replicas_identical);
    }
}

TEST(TrainMutation, MissingAllGatherReadsFreedParameters) {
  const Outcome outcome =
      train_spec("zoo:SimpleMLP",
                 R"({"world_size": 2, "batch_size": 8, "iterations": 2, "steps": [{"fully_shard": {"module": ""}}]})",
                 [](core::PlanResult& planned) {
                   for (core::ProgramOp& op : planned.program.ops)
                     if (op.role == core::OpRole::fsdp_unshard && op.iteration == 2) {
                       op.role = core::OpRole::ddp_used_map;  // the bytes still move, the parameters are not gathered
                       op.kind = core::CollectiveKind::all_reduce;
                     }
                 });
  for (const RankError& error : outcome.errors) ASSERT_EQ(error.message, "");
  EXPECT_FALSE(outcome.summary.passed);
}

TEST(TrainMutation, WrongRedistributionIsNamed) {
  const Outcome outcome = train_spec("zoo:TestModel", "builtin:fsdp-tp", [](core::PlanResult& planned) {
    for (core::ProgramOp& op : planned.program.ops)
      if (op.role == core::OpRole::tp_input) op.from = core::Placement::shard(1);
  });
  const std::string& message = outcome.errors[0].message;
  ASSERT_NE(message, "");
  EXPECT_NE(message.find("mlp.net1 input"), std::string::npos) << message;
  EXPECT_NE(message.find("from Shard(1) but the tensor is Shard(0)"), std::string::npos) << message;
}

TEST(TrainTensorParallel, PartialGradientsAccumulateAcrossMicroSteps) {
  // The RMSNorm weight's Partial gradient is summed per micro-step (from_local's backward), not
  // after accumulating: summing .grad twice would count the first micro-step tp times.
  const char* plan = R"json({"world_size": 4, "batch_size": 2, "iterations": 4,
      "gradient_accumulation_steps": 2, "optimizer": {"type": "sgd", "lr": 0.5},
      "mesh": {"shape": [2, 2], "dim_names": ["dp", "tp"]},
      "steps": [{"parallelize_module": {"module": "", "mesh_dim": "tp", "plan": {
                   "mlp.net1": {"style": "colwise", "input_layouts": "Shard(0)"},
                   "mlp.net2": {"style": "rowwise", "output_layouts": "Shard(0)"}}}},
                {"distribute_module": {"module": "mlp_norm", "mesh_dim": "tp", "input_layouts": "Shard(0)"}},
                {"fully_shard": {"module": "", "mesh_dim": "dp"}}]})json";
  expect_parity(train_spec("zoo:TestModel", plan));
}

TEST(TrainMutation, ModuleStatesBroadcastMatters) {
  // Ranks whose copies a broadcast overwrites start from different values: dropping a parameter
  // from DDP's init_sync broadcast (or FSDP's sync_module_states) leaves it wrong there.
  for (const char* step :
       {R"({"replicate": {"module": ""}})", R"({"fully_shard": {"module": "", "sync_module_states": true}})"}) {
    SCOPED_TRACE(step);
    const std::string plan =
        std::string(R"({"world_size": 2, "batch_size": 4, "iterations": 2, "steps": [)") + step + "]}";
    expect_parity(train_spec("zoo:SimpleMLP", plan));
    const Outcome broken = train_spec("zoo:SimpleMLP", plan, [](core::PlanResult& planned) {
      for (core::ProgramOp& op : planned.program.ops)
        if (op.role == core::OpRole::ddp_module_states || op.role == core::OpRole::fsdp_module_states)
          std::erase(op.params, "net2.weight");
    });
    for (const RankError& error : broken.errors) ASSERT_EQ(error.message, "");
    EXPECT_FALSE(broken.summary.passed);
  }
}

TEST(TrainMutation, BackwardWithoutItsPreBackwardAllGatherReadsFreedParameters) {
  // FULL_SHARD frees non-root units after forward; without the pre-backward all-gather, backward
  // reads NaN.
  const Outcome outcome =
      train_spec("zoo:SimpleMLP", R"({"world_size": 2, "batch_size": 4, "iterations": 1,
      "steps": [{"fully_shard": {"module": "", "policy": {"module_types": ["Linear"]}}}]})",
                 [](core::PlanResult& planned) {
                   for (core::ProgramOp& op : planned.program.ops)
                     if (op.role == core::OpRole::fsdp_unshard && op.phase == core::Phase::backward) {
                       op.role = core::OpRole::ddp_used_map;  // same bytes, no gather
                       op.kind = core::CollectiveKind::all_reduce;
                     }
                 });
  for (const RankError& error : outcome.errors) ASSERT_EQ(error.message, "");
  EXPECT_FALSE(outcome.summary.passed);
}

TEST(TrainSupport, UnsupportedModelsAndPlansSayWhy) {
  const core::Model gpt = core::load_model("zoo:gpt:layers=1,hidden=64,heads=2,ffn=128,vocab=100,seq=8");
  const core::Plan ddp = core::load_plan("builtin:ddp");
  EXPECT_NE(exec::train_unsupported_reason(gpt, ddp, core::plan_training(gpt, ddp)), "");
  const core::Model mlp = core::load_model("zoo:SimpleMLP");
  const core::Plan mixed = load_plan_text(R"({"world_size": 2, "steps": [{"fully_shard": {"module": "",
      "mixed_precision": {"param_dtype": "bfloat16"}}}]})");
  const std::string why = exec::train_unsupported_reason(mlp, mixed, core::plan_training(mlp, mixed));
  EXPECT_NE(why.find("mixed precision"), std::string::npos) << why;
  EXPECT_EQ(exec::train_unsupported_reason(mlp, ddp, core::plan_training(mlp, ddp)), "");
  const core::Plan clipped = load_plan_text(R"({"world_size": 2, "optimizer": {"max_norm": 1.0},
      "steps": [{"replicate": {"module": ""}}]})");
  const std::string clip_why = exec::train_unsupported_reason(mlp, clipped, core::plan_training(mlp, clipped));
  EXPECT_NE(clip_why.find("optimizer.max_norm (clip_grad_norm_) has no --train numerics"), std::string::npos)
      << clip_why;
  const core::Plan scaled = load_plan_text(R"({"world_size": 2, "optimizer": {"grad_scaler": true},
      "steps": [{"replicate": {"module": ""}}]})");
  const std::string scale_why = exec::train_unsupported_reason(mlp, scaled, core::plan_training(mlp, scaled));
  EXPECT_NE(scale_why.find("optimizer.grad_scaler (loss scaling) has no --train numerics"), std::string::npos)
      << scale_why;
  // A parameter no forward step reaches has no gradient: refused rather than judged.
  const core::Model unused = core::parse_model(core::JsonReader(nlohmann::json::parse(R"({"name": "M",
      "modules": [{"name": "a", "type": "Linear", "in_features": 4, "out_features": 4},
                  {"name": "b", "type": "Linear", "in_features": 4, "out_features": 4}], "forward": ["a"]})"),
                                                                "model.json"));
  const std::string unused_why = exec::train_unsupported_reason(unused, ddp, core::plan_training(unused, ddp));
  EXPECT_NE(unused_why.find("b.weight is never used"), std::string::npos) << unused_why;
}

}  // namespace
}  // namespace stratsim::test
