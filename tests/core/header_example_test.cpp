// The usage example that opens stratsim/core/planner.hpp, run as written, so the header's first
// lines cannot drift from the API.
#include <gtest/gtest.h>

#include <sstream>

#include "stratsim/core/model_io.hpp"
#include "stratsim/core/planner.hpp"

using namespace stratsim;

TEST(HeaderExample, PlannerHeaderExampleRuns) {
  std::ostringstream out;
  const core::Model model = core::load_model("zoo:Net");
  const core::Plan plan = core::load_plan("builtin:ddp");
  const core::PlanResult result = core::plan_training(model, plan, {.rank = 0});
  for (const auto& [op, count] : result.counts()) out << op << " x" << count << "\n";
  const core::Program& program = result.program;
  // Seed Net under DDP: three rebuilt buckets, one all-reduce each in the steady state.
  EXPECT_EQ(out.str(), "c10d.allreduce_ x3\n");
  EXPECT_FALSE(program.ops.empty());
}
