// The executor on the seed plans, ranks as threads over Gloo: every op runs once per rank, stream
// order and cross-stream dependencies hold in the measured times, every collective group
// instance is recorded with its members, and records survive the trip through the store.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "stratsim/core/errors.hpp"
#include "stratsim/core/model_io.hpp"
#include "stratsim/core/plan.hpp"
#include "stratsim/core/planner.hpp"
#include "stratsim/exec/backend.hpp"
#include "stratsim/exec/executor.hpp"

namespace stratsim::test {
namespace {

core::Program planned(const std::string& model, const std::string& plan, int iterations = 2) {
  core::PlanOptions options;
  options.iterations = iterations;
  return core::plan_training(core::load_model(model), core::load_plan(plan), options).program;
}

// Runs the program on program.world_size threads; returns every rank's record.
std::vector<exec::RankRecord> run_threads(const core::Program& program, exec::ComputeMode compute) {
  std::string dir = (std::filesystem::temp_directory_path() / "stratsim-exec-test-XXXXXX").string();
  ::mkdtemp(dir.data());
  std::vector<exec::RankRecord> records(program.world_size);
  std::vector<std::string> errors(program.world_size);
  std::vector<std::thread> threads;
  exec::ExecOptions options;
  options.compute = compute;
  options.compute_scale = 1e-3;  // the seeds' GEMMs in well under a second
  for (int rank = 0; rank < program.world_size; ++rank)
    threads.emplace_back([&, rank] {
      try {
        exec::BackendOptions backend_options;
        backend_options.timeout = std::chrono::seconds(30);
        auto backend = exec::make_gloo_backend(exec::parse_rendezvous("file:" + dir, "t"), rank, program.world_size,
                                               backend_options);
        exec::RankRecord record = exec::execute(program, *backend, options);
        backend->publish("record/" + std::to_string(rank), exec::encode(record));
        records[rank] = exec::decode_record(backend->fetch("record/" + std::to_string(rank)));
      } catch (const std::exception& error) {
        errors[rank] = error.what();
      }
    });
  for (std::thread& thread : threads) thread.join();
  std::filesystem::remove_all(dir);
  for (const std::string& error : errors) EXPECT_EQ(error, "");
  return records;
}

void expect_consistent(const core::Program& program, const core::RunResult& result) {
  ASSERT_EQ(result.timings.size(), static_cast<std::size_t>(program.world_size));
  EXPECT_EQ(result.mode, "measured");
  for (int rank = 0; rank < program.world_size; ++rank) {
    const auto& timings = result.timings[rank];
    std::vector<double> stream_free(program.streams.size(), 0.0);
    for (const core::ProgramOp& op : program.ops) {
      const core::OpTiming& t = timings[op.id];
      EXPECT_LE(0.0, t.issue);
      EXPECT_LE(t.issue, t.start + 1e-12) << op.name;
      EXPECT_LE(t.start, t.end) << op.name;
      EXPECT_GE(t.issue, stream_free[op.stream]) << "stream order broken at " << op.name;
      stream_free[op.stream] = t.end;
      for (int dep : op.deps) EXPECT_GE(t.issue, timings[dep].end) << op.name << " ran before its dependency";
    }
  }
  std::size_t expected = 0;
  for (const core::ProgramOp& op : program.ops)
    if (op.type == core::OpType::collective)
      expected +=
          static_cast<std::size_t>(program.world_size / program.mesh.group_size(program.groups[op.group].mesh_dims));
  ASSERT_EQ(result.collectives.size(), expected);
  for (const core::CollectiveRun& run : result.collectives) {
    EXPECT_EQ(run.ranks, program.mesh.all_groups(program.groups[program.ops[run.op].group].mesh_dims)[run.instance]);
    EXPECT_TRUE(run.algorithm.starts_with("gloo")) << run.algorithm;
    for (int rank : run.ranks) {
      EXPECT_GE(run.start, result.timings[rank][run.op].issue);
      EXPECT_GE(run.end, result.timings[rank][run.op].end);
      EXPECT_DOUBLE_EQ(result.timings[rank][run.op].start, std::min(run.start, result.timings[rank][run.op].end));
    }
  }
  ASSERT_EQ(result.iteration_end.size(), static_cast<std::size_t>(program.iterations));
  for (std::size_t i = 1; i < result.iteration_end.size(); ++i)
    EXPECT_LE(result.iteration_end[i - 1], result.iteration_end[i]);
  EXPECT_DOUBLE_EQ(result.makespan, result.iteration_end.back());
}

TEST(Executor, SeedDdpRunsEveryOpInOrder) {
  const core::Program program = planned("zoo:Net", "builtin:ddp");
  const auto records = run_threads(program, exec::ComputeMode::gemm);
  const core::RunResult result = exec::assemble(program, records, "gloo", "test host");
  expect_consistent(program, result);
  // Both rates a cpu platform is calibrated from are measured and reported.
  EXPECT_GT(records[0].gemm_flops_per_second, 0);
  EXPECT_GT(records[0].memory_bytes_per_second, 0);
  EXPECT_EQ(result.extra["memory_gbps_per_rank"].size(), 2u);
}

// Two mesh dims (dp x tp): tensor-parallel and FSDP collectives on their own sub-groups.
TEST(Executor, TwoDimensionalMeshRunsOnSubGroups) {
  const core::Program program = planned("zoo:TestModel", "builtin:fsdp-tp");
  const auto records = run_threads(program, exec::ComputeMode::wait);
  expect_consistent(program, exec::assemble(program, records, "gloo", "test host"));
}

// A backend whose start barrier fails, as when a peer never arrives: the error must leave
// execute() as a CommError after the stream threads are joined (a joinable thread destroyed by
// the unwinding would abort the process instead).
class BarrierFails : public exec::Backend {
 public:
  explicit BarrierFails(std::unique_ptr<exec::Backend> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  std::unique_ptr<exec::Communicator> communicator(const std::string& key, const std::vector<int>& members) override {
    return inner_->communicator(key, members);
  }
  std::unique_ptr<exec::StreamResources> stream_resources() override { return inner_->stream_resources(); }
  void barrier() override { throw exec::CommError("barrier: Timed out waiting for rank 1"); }
  void publish(const std::string& key, const std::string& value) override { inner_->publish(key, value); }
  std::string fetch(const std::string& key) override { return inner_->fetch(key); }

 private:
  std::unique_ptr<exec::Backend> inner_;
};

TEST(Executor, AFailedStartBarrierIsAnErrorNotAnAbort) {
  std::string dir = (std::filesystem::temp_directory_path() / "stratsim-exec-barrier-XXXXXX").string();
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const std::string plan = dir + "/plan.json";
  std::ofstream(plan) << R"({"world_size": 1, "batch_size": 1, "steps": [{"replicate": {"module": ""}}]})";
  const core::Program program = planned("zoo:ReplicateNet", plan, 1);
  BarrierFails backend(exec::make_gloo_backend(exec::parse_rendezvous("file:" + dir, "t"), 0, 1, {}));
  exec::ExecOptions options;
  options.compute = exec::ComputeMode::skip;
  EXPECT_THROW(exec::execute(program, backend, options), exec::CommError);
  std::filesystem::remove_all(dir);
}

TEST(Executor, RecordsRoundTripAndMismatchesAreRejected) {
  exec::RankRecord record;
  record.rank = 1;
  record.timings = {{0.5, 0.75, 1.25}};
  record.algorithms = {"gloo ring"};
  record.gemm_flops_per_second = 3e9;
  record.memory_bytes_per_second = 2e10;
  record.wall_seconds = 2;
  const exec::RankRecord back = exec::decode_record(exec::encode(record));
  EXPECT_EQ(back.rank, 1);
  EXPECT_EQ(back.timings[0].start, 0.75);
  EXPECT_EQ(back.algorithms, record.algorithms);
  EXPECT_EQ(back.memory_bytes_per_second, 2e10);
  const core::Program program = planned("zoo:Net", "builtin:ddp", 1);
  EXPECT_THROW(exec::assemble(program, {record}, "gloo", "x"), core::InputError);
}

}  // namespace
}  // namespace stratsim::test
