// The seed scenarios and a LLaMA-7B-class FSDP plan simulate end to end, deterministically, and
// respect the physical limits of simulators.md section 5.
#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "stratsim/core/json_reader.hpp"
#include "stratsim/core/model_io.hpp"
#include "stratsim/core/plan.hpp"
#include "stratsim/core/planner.hpp"
#include "stratsim/core/run_analysis.hpp"
#include "stratsim/core/trace.hpp"
#include "stratsim/sim/simulator.hpp"

namespace stratsim::test {
namespace {

struct Scenario {
  std::string name, model, plan, platform;
};

core::Plan plan_of(const std::string& text) {
  if (text.starts_with("builtin:") || text.find('{') == std::string::npos) return core::load_plan(text);
  return core::parse_plan(core::JsonReader(nlohmann::json::parse(text), "scenario"));
}

void PrintTo(const Scenario& scenario, std::ostream* out) { *out << scenario.name; }

class Scenarios : public ::testing::TestWithParam<Scenario> {};

TEST_P(Scenarios, SimulatesDeterministicallyWithinPhysicalLimits) {
  const Scenario& s = GetParam();
  const core::Model model = core::load_model(s.model);
  core::PlanOptions plan_options;
  plan_options.iterations = 2;
  const core::Program program = core::plan_training(model, plan_of(s.plan), plan_options).program;
  const sim::PlatformSpec platform = sim::parse_platform(s.platform);
  const sim::SimResult a = sim::simulate(program, platform);
  const sim::SimResult b = sim::simulate(program, platform);
  const core::Analysis analysis = core::analyse(program, a, core::Workload{8, 0});
  // Byte-identical outputs across runs.
  EXPECT_EQ(core::json_report(program, a, analysis).dump(),
            core::json_report(program, b, core::analyse(program, b, core::Workload{8, 0})).dump());
  EXPECT_EQ(core::chrome_trace(program, a), core::chrome_trace(program, b));
  // Every op ran, in stream order, after its dependencies.
  ASSERT_EQ(a.timings.size(), 1u);  // representative mode: one simulated rank stands for all
  for (const auto& timings : a.timings)
    for (const core::ProgramOp& op : program.ops) {
      EXPECT_LE(timings[op.id].issue, timings[op.id].start + 1e-15) << op.name;
      EXPECT_LE(timings[op.id].start, timings[op.id].end) << op.name;
      for (int dep : op.deps) EXPECT_LE(timings[dep].end, timings[op.id].issue + 1e-15) << op.name << " after " << dep;
    }
  ASSERT_EQ(analysis.iterations.size(), 2u);
  for (const core::IterationStats& it : analysis.iterations) EXPECT_GT(it.step_time, 0);
  // busbw never beats the fastest link of the platform (no in-network reduction is modelled).
  double fastest = 0;
  for (const sim::LinkLoad& link : a.links) fastest = std::max(fastest, link.bandwidth);
  for (const core::CollectiveStats& c : analysis.collectives)
    EXPECT_LE(c.busbw, fastest * (1 + 1e-9)) << c.name << " " << c.algorithm;
  for (const sim::LinkLoad& link : a.links) EXPECT_LE(link.utilisation, 1 + 1e-9) << link.name;
}

INSTANTIATE_TEST_SUITE_P(
    Seeds, Scenarios,
    ::testing::Values(
        Scenario{"ddp_net", "zoo:Net", "builtin:ddp", "h100:gpus=2"},
        Scenario{"fsdp_tp", "zoo:TestModel", STRATSIM_TEST_DATA "/seed_fsdp_tp.yaml", "h100:gpus=4"},
        Scenario{"ddp_tp", "zoo:Net", "builtin:ddp-tp", "h100:nodes=2,gpus=2"},
        Scenario{"compose_fully_shard_replicate", "zoo:CompositeModel",
                 R"({"world_size": 2, "steps": [{"fully_shard": {"module": "u1"}}, {"fully_shard": {"module": "u2"}},
                     {"replicate": {"module": ""}}]})",
                 "a100:gpus=2"},
        Scenario{"llama7b_fsdp", "zoo:llama2-7b",
                 R"({"world_size": 16, "batch_size": 1, "steps": [{"fully_shard": {"module": "",
                     "policy": {"module_types": ["TransformerBlock"]}}}]})",
                 "h100:nodes=2"},
        Scenario{"llama7b_fsdp_cpu", "zoo:llama2-7b:layers=2,hidden=256,heads=4,kv_heads=4,ffn=512,vocab=512,seq=64",
                 R"({"world_size": 4, "batch_size": 1, "steps": [{"fully_shard": {"module": "",
                     "policy": {"module_types": ["TransformerBlock"]}}}]})",
                 "cpu:procs=4"}),
    [](const ::testing::TestParamInfo<Scenario>& info) { return info.param.name; });

}  // namespace
}  // namespace stratsim::test
