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

#include "stratsim/core/errors.hpp"
#include "stratsim/core/model_io.hpp"
#include "stratsim/core/plan.hpp"
#include "stratsim/core/planner.hpp"
#include "stratsim/exec/backend.hpp"
#include "stratsim/exec/train.hpp"

namespace stratsim::test {
namespace {

struct Outcome {
  exec::TrainingSummary summary;
  std::vector<std::string> errors;  // per rank, "" when it finished
};

using Mutation = std::function<void(core::PlanResult&)>;

// Writes `plan_json` to a file (plans load from files or builtin names).
std::string plan_file(const std::string& plan_json) {
  static int counter = 0;
  const auto path = std::filesystem::temp_directory_path() /
                    ("stratsim-train-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".json");
  std::ofstream(path) << plan_json;
  return path.string();
}

Outcome train_threads(const std::string& model_spec, const std::string& plan_spec, const Mutation& mutate = {},
                      exec::TrainOptions options = {}) {
  const core::Model model = core::load_model(model_spec);
  const core::Plan plan = core::load_plan(plan_spec.starts_with("builtin:") ? plan_spec : plan_file(plan_spec));
  const int world = plan.world_size;
  std::string dir = (std::filesystem::temp_directory_path() / "stratsim-train-test-XXXXXX").string();
  ::mkdtemp(dir.data());
  std::vector<core::PlanResult> planned(world);
  for (int rank = 0; rank < world; ++rank) {
    core::PlanOptions plan_options;
    plan_options.rank = rank;
    planned[rank] = core::plan_training(model, plan, plan_options);
    if (mutate) mutate(planned[rank]);
  }
  std::vector<exec::TrainRecord> records(world);
  Outcome outcome;
  outcome.errors.resize(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank)
    threads.emplace_back([&, rank] {
      try {
        exec::BackendOptions backend_options;
        backend_options.timeout = std::chrono::seconds(10);
        auto backend =
            exec::make_gloo_backend(exec::parse_rendezvous("file:" + dir, "t"), rank, world, backend_options);
        records[rank] =
            exec::decode_train_record(exec::encode(exec::run_training(model, plan, planned[rank], *backend, options)));
      } catch (const std::exception& error) {
        outcome.errors[rank] = error.what();
      }
    });
  for (std::thread& thread : threads) thread.join();
  std::filesystem::remove_all(dir);
  bool all_done = true;
  for (const std::string& error : outcome.errors) all_done = all_done && error.empty();
  if (all_done) outcome.summary = exec::summarize(model, plan, planned[0], records, options);
  return outcome;
}

// Parity: every rank finished, every parameter within tolerance, replicas identical, and the
// distributed loss equals the local one.
void expect_parity(const Outcome& outcome, double loss_rtol = 1e-5) {
  for (const std::string& error : outcome.errors) ASSERT_EQ(error, "");
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

// Local training moves the parameters: parity is not trivially met by a model that never trains.
void expect_training_moved(const exec::TrainingSummary& s) {
  ASSERT_GE(s.reference_loss.size(), 2u);
  EXPECT_NE(s.reference_loss.front(), s.reference_loss.back());
}

// ---- seed 003 (test_replicate.py): replicate on one or several modules, ignored modules.

TEST(TrainReplicate, SingleModuleMatchesLocalTraining) {
  const Outcome outcome = train_threads("zoo:ReplicateNet", R"({"world_size": 2, "batch_size": 1, "iterations": 3,
      "optimizer": {"type": "sgd", "lr": 1.0}, "steps": [{"replicate": {"module": ""}}]})");
  expect_parity(outcome);
  expect_training_moved(outcome.summary);
  EXPECT_EQ(outcome.summary.global_rows, 2);
  EXPECT_EQ(outcome.summary.collectives.at("c10d.allreduce_"), 3);  // one 72 B bucket per iteration
}

TEST(TrainReplicate, MultiModuleMatchesLocalTraining) {
  const Outcome outcome = train_threads("zoo:ReplicateNet", R"({"world_size": 2, "batch_size": 1, "iterations": 2,
      "optimizer": {"type": "sgd", "lr": 1.0},
      "steps": [{"replicate": {"module": "fc1"}}, {"replicate": {"module": "fc2"}}, {"replicate": {"module": "fc3"}}]})");
  expect_parity(outcome);
}

TEST(TrainReplicate, IgnoredModuleStaysUnsynchronised) {
  const Outcome outcome = train_threads("zoo:ReplicateNet", R"({"world_size": 2, "batch_size": 3, "iterations": 2,
      "steps": [{"replicate": {"module": "", "ignored_modules": ["fc1"]}}]})");
  for (const std::string& error : outcome.errors) ASSERT_EQ(error, "");
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
    const Outcome outcome = train_threads(
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
      const Outcome outcome = train_threads(
          "zoo:SimpleMLP", std::string(R"({"world_size": 2, "batch_size": 64, "iterations": 3, "optimizer": )") +
                               optimizer + R"(, "steps": [{"fully_shard": {"module": "", "strategy": ")" + strategy +
                               R"("}}]})");
      expect_parity(outcome);
    }
}

TEST(TrainFullyShard, WrappedUnitsOnFourRanksWithOrigParams) {
  // Several units and a root without a handle; ReplicateNet's Linear(2, 2) units are uneven
  // (6 elements, or 8 with use_orig_params alignment, over 4 ranks: padded shards).
  for (auto [model, units] : {std::pair{"zoo:CompositeModel", 8}, std::pair{"zoo:ReplicateNet", 3}})
    for (const char* orig : {"false", "true"}) {
      SCOPED_TRACE(std::string(model) + " use_orig_params " + orig);
      const Outcome outcome = train_threads(model, std::string(R"({"world_size": 4, "batch_size": 2, "iterations": 3,
          "optimizer": {"type": "sgd", "lr": 0.1, "momentum": 0.9},
          "steps": [{"fully_shard": {"module": "", "policy": {"module_types": ["Linear"]}, "use_orig_params": )") +
                                                       orig + "}}]}");
      expect_parity(outcome);
      EXPECT_EQ(outcome.summary.state_dict_all_gathers, units);  // one per unit with parameters
    }
}

TEST(TrainFullyShard, HybridShardOverA2x2Mesh) {
  const Outcome outcome = train_threads("zoo:SimpleMLP", R"({"world_size": 4, "batch_size": 8, "iterations": 3,
      "mesh": {"shape": [2, 2], "dim_names": ["replicate", "shard"]}, "optimizer": {"type": "sgd", "lr": 0.1},
      "steps": [{"fully_shard": {"module": "", "mesh_dim": ["replicate", "shard"], "strategy": "HYBRID_SHARD"}}]})");
  expect_parity(outcome);
  EXPECT_EQ(outcome.summary.global_rows, 32);
}

TEST(TrainFullyShard, CheckpointedUnitsMatchLocalTraining) {
  const Outcome outcome = train_threads("zoo:CompositeModel", R"({"world_size": 2, "batch_size": 4, "iterations": 2,
      "steps": [{"checkpoint": {"module": "u1"}}, {"checkpoint": {"module": "u2"}},
                {"fully_shard": {"module": "u1"}}, {"fully_shard": {"module": "u2"}}, {"fully_shard": {"module": ""}}]})");
  expect_parity(outcome);
}

// ---- gradient accumulation (no_sync for the first k-1 of every k micro-steps)

TEST(TrainAccumulation, ReplicateAndShardGradOpAccumulateLikeLocal) {
  for (const char* step :
       {R"({"replicate": {"module": ""}})", R"({"fully_shard": {"module": "", "strategy": "SHARD_GRAD_OP"}})",
        R"({"fully_shard": {"module": "", "strategy": "FULL_SHARD"}})"}) {
    SCOPED_TRACE(step);
    const Outcome outcome =
        train_threads("zoo:SimpleMLP", std::string(R"({"world_size": 2, "batch_size": 4, "iterations": 4,
            "gradient_accumulation_steps": 2, "optimizer": {"type": "sgd", "lr": 0.5, "momentum": 0.9},
            "steps": [)") + step + "]}");
    expect_parity(outcome);
    EXPECT_EQ(outcome.summary.optimizer_steps_after, (std::vector<int>{2, 4}));
  }
}

// ---- tensor parallelism (seeds 000 and 004)

TEST(TrainTensorParallel, DdpTpMatchesLocalTraining) {
  // DDP_TP_Test's plan (fc1/fc3 Colwise, fc2/fc4 Rowwise, replicate over dp) on a narrow Net.
  const Outcome outcome = train_threads("zoo:Net:dim=16", "builtin:ddp-tp");
  expect_parity(outcome);
  EXPECT_EQ(outcome.summary.collectives.at("c10d_functional.all_reduce"), 9);  // 3 per iteration
}

TEST(TrainTensorParallel, FsdpTpExtensionMatchesLocalTraining) {
  // test_fsdp_tp_extension_grad: sequence-sharded input, RMSNorm with a Partial weight gradient.
  const Outcome outcome = train_threads("zoo:TestModel", "builtin:fsdp-tp");
  expect_parity(outcome);
  EXPECT_EQ(outcome.summary.global_rows, 8);  // 2 rows per rank, 4 per tp group, 2 dp replicas
}

TEST(TrainTensorParallel, OutputLayoutsAndReplicatedInputs) {
  // Colwise with Replicate output (all-gather of the last dim), Rowwise fed a Replicate input
  // (local chunk, all-gather in backward), and a colwise last layer with a Shard(-1) output.
  const Outcome outcome = train_threads("zoo:SimpleModel", R"({"world_size": 2, "batch_size": 4, "iterations": 2,
      "input_requires_grad": true, "optimizer": {"type": "adam", "lr": 0.05},
      "mesh": {"shape": [2], "dim_names": ["tp"]},
      "steps": [{"parallelize_module": {"module": "", "mesh_dim": "tp",
                 "plan": {"net1": {"style": "colwise", "output_layouts": "Replicate"},
                          "net2": {"style": "rowwise", "input_layouts": "Replicate"},
                          "net3": "colwise"}}}]})");
  expect_parity(outcome);
}

// ---- compress hooks: 16-bit gradients, within those dtypes' tolerance

TEST(TrainReplicate, CompressHooksWithinTheirTolerance) {
  for (auto [hook, rtol] : {std::pair{"fp16_compress", 1e-3}, std::pair{"bf16_compress", 1.6e-2}}) {
    SCOPED_TRACE(hook);
    exec::TrainOptions options;
    options.rtol = rtol;
    const Outcome outcome = train_threads("zoo:SimpleMLP",
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
      train_threads("zoo:SimpleMLP",
                    R"({"world_size": 2, "batch_size": 8, "iterations": 2, "steps": [{"replicate": {"module": ""}}]})",
                    [](core::PlanResult& planned) {
                      for (core::ProgramOp& op : planned.program.ops)
                        if (op.role == core::OpRole::ddp_bucket) std::erase(op.params, "net1.weight");
                    });
  for (const std::string& error : outcome.errors) ASSERT_EQ(error, "");
  EXPECT_FALSE(outcome.summary.passed);
  for (const auto& p : outcome.summary.params)
    if (p.fqn == "net1.weight") {
      EXPECT_GT(p.mismatches, 0);
      EXPECT_FALSE(p.replicas_identical);
    }
}

TEST(TrainMutation, MissingAllGatherReadsFreedParameters) {
  const Outcome outcome = train_threads(
      "zoo:SimpleMLP",
      R"({"world_size": 2, "batch_size": 8, "iterations": 2, "steps": [{"fully_shard": {"module": ""}}]})",
      [](core::PlanResult& planned) {
        for (core::ProgramOp& op : planned.program.ops)
          if (op.role == core::OpRole::fsdp_unshard && op.iteration == 2) {
            op.role = core::OpRole::tp_param_grad;  // the bytes still move, the parameters are not gathered
            op.params = {"net2.bias"};
            op.kind = core::CollectiveKind::all_reduce;
          }
      });
  for (const std::string& error : outcome.errors) ASSERT_EQ(error, "");
  EXPECT_FALSE(outcome.summary.passed);
}

TEST(TrainMutation, WrongRedistributionIsNamed) {
  const Outcome outcome = train_threads("zoo:TestModel", "builtin:fsdp-tp", [](core::PlanResult& planned) {
    for (core::ProgramOp& op : planned.program.ops)
      if (op.role == core::OpRole::tp_input) op.from = core::Placement::shard(1);
  });
  ASSERT_NE(outcome.errors[0], "");
  EXPECT_NE(outcome.errors[0].find("mlp.net1 input"), std::string::npos) << outcome.errors[0];
  EXPECT_NE(outcome.errors[0].find("Shard(0)"), std::string::npos) << outcome.errors[0];
}

TEST(TrainSupport, UnsupportedModelsAndPlansSayWhy) {
  const core::Model gpt = core::load_model("zoo:gpt:layers=1,hidden=64,heads=2,ffn=128,vocab=100,seq=8");
  const core::Plan ddp = core::load_plan("builtin:ddp");
  EXPECT_NE(exec::train_unsupported_reason(gpt, ddp, core::plan_training(gpt, ddp)), "");
  const core::Model mlp = core::load_model("zoo:SimpleMLP");
  const core::Plan mixed = core::load_plan(plan_file(R"({"world_size": 2, "steps": [{"fully_shard": {"module": "",
      "mixed_precision": {"param_dtype": "bfloat16"}}}]})"));
  const std::string why = exec::train_unsupported_reason(mlp, mixed, core::plan_training(mlp, mixed));
  EXPECT_NE(why.find("mixed precision"), std::string::npos) << why;
  EXPECT_EQ(exec::train_unsupported_reason(mlp, ddp, core::plan_training(mlp, ddp)), "");
}

}  // namespace
}  // namespace stratsim::test
