// Overlap emerges from the schedule (checked on the second, steady-state step): DDP buckets that fit under backward compute hide their
// all-reduces (near-zero exposed communication); one giant bucket cannot start before backward
// ends, so its all-reduce is all exposed.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>

#include "stratsim/core/json_reader.hpp"
#include "stratsim/core/model_io.hpp"
#include "stratsim/core/plan.hpp"
#include "stratsim/core/planner.hpp"
#include "stratsim/core/run_analysis.hpp"
#include "stratsim/sim/simulator.hpp"

namespace stratsim::test {
namespace {

core::Analysis ddp_step(double bucket_cap_mb, const std::string& platform = "h100:model=ideal") {
  // A GPT whose first layer (small embedding) is cheap, so the last bucket is small.
  const core::Model model = core::load_model("zoo:gpt:layers=8,hidden=1024,heads=8,kv_heads=8,ffn=4096,vocab=1024,seq=1024");
  const nlohmann::json doc = {{"world_size", 8},
                              {"batch_size", 4},
                              {"steps", {{{"replicate", {{"module", ""}, {"bucket_cap_mb", bucket_cap_mb}}}}}}};
  const core::Plan plan = core::parse_plan(core::JsonReader(doc, "overlap"));
  core::PlanOptions options;
  options.iterations = 2;
  const core::Program program = core::plan_training(model, plan, options).program;
  // The ideal cost model: these tests are about the schedule (what hides under what). Interference
  // (cost_model.hpp) makes overlapped compute slower, which the last test here measures.
  const sim::SimResult result = sim::simulate(program, sim::parse_platform(platform));
  return core::analyse(program, result, core::Workload{32, 1024});
}

TEST(Overlap, SmallBucketsHideUnderBackward) {
  const core::Analysis analysis = ddp_step(25);
  ASSERT_EQ(analysis.iterations.size(), 2u);
  const core::IterationStats& rank = analysis.iterations.back();  // steady state: rebuilt buckets
  ASSERT_GT(rank.communication, 0);
  EXPECT_LT(rank.exposed_communication / rank.communication, 0.1)
      << "exposed " << rank.exposed_communication << " of " << rank.communication;
  EXPECT_GT(rank.overlap, 0.9);
}

TEST(Overlap, OneGiantBucketIsAllExposed) {
  const core::Analysis analysis = ddp_step(100000);
  const core::IterationStats& rank = analysis.iterations.back();
  ASSERT_GT(rank.communication, 0);
  EXPECT_GT(rank.exposed_communication / rank.communication, 0.9)
      << "exposed " << rank.exposed_communication << " of " << rank.communication;
  EXPECT_LT(rank.overlap, 0.1);
}

TEST(Overlap, HidingCommunicationShortensTheStep) {
  const core::Analysis hidden = ddp_step(25);
  const core::Analysis exposed = ddp_step(100000);
  EXPECT_LT(hidden.iterations.back().step_time, exposed.iterations.back().step_time);
}

// Interference: compute that runs beside an NCCL kernel shares the SMs, so overlap costs compute
// time. With the compute slowdown alone (everything else ideal) the overlapped run's compute grows
// by up to the factor, and far more than the run with one giant bucket, where only the first
// step's parameter broadcasts overlap anything.
TEST(Overlap, InterferenceSlowsOverlappedComputeOnly) {
  const std::string interfering = std::string(STRATSIM_TEST_DATA) + "/sim/interference_only.yaml";
  const core::Analysis hidden_ideal = ddp_step(25);
  const core::Analysis hidden_slow = ddp_step(25, interfering);
  const core::Analysis exposed_ideal = ddp_step(100000);
  const core::Analysis exposed_slow = ddp_step(100000, interfering);
  const double ideal_compute = hidden_ideal.ranks[0].compute;
  const double slow_compute = hidden_slow.ranks[0].compute;
  // About 4.5 % here: the backward GEMMs under the bucket all-reduces are a fraction of the step's
  // compute (forward, norms, attention and the element-wise graph ops mostly run alone).
  EXPECT_GT(slow_compute, ideal_compute * 1.03);
  EXPECT_LE(slow_compute, ideal_compute * 1.5 * (1 + 1e-9));
  const double exposed_growth = exposed_slow.ranks[0].compute / exposed_ideal.ranks[0].compute;
  EXPECT_GT(slow_compute / ideal_compute - 1, 2 * (exposed_growth - 1));
  EXPECT_GT(hidden_slow.iterations.back().step_time, hidden_ideal.iterations.back().step_time);
}

}  // namespace
}  // namespace stratsim::test
