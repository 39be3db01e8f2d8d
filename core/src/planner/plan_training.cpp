// plan_training: the strategy core's entry point. The planner lives in core/src/planner/: the walk
// (walk.hpp) runs a training step the way PyTorch executes it and calls each parallelism at its
// hooks: DDP (ddp.hpp), FSDP (fsdp.hpp) and tensor parallelism (tensor_parallel.hpp), which own their
// state and write through one ProgramBuilder (program_builder.hpp). The compute cost model is
// compute_cost.hpp.
#include "walk.hpp"

namespace stratsim::core {

PlanResult plan_training(const Model& model, const Plan& plan, const PlanOptions& options) {
  return planner::Walk(model, plan, options).run();
}

std::map<std::string, int> PlanResult::counts() const {
  std::map<std::string, int> out;
  if (iterations.empty()) return out;
  for (const CollectiveRecord& c : iterations.back().collectives) ++out[c.op];
  return out;
}

std::map<std::string, std::map<std::string, int>> PlanResult::counts_by_phase() const {
  std::map<std::string, std::map<std::string, int>> out;
  if (iterations.empty()) return out;
  for (const CollectiveRecord& c : iterations.back().collectives) ++out[std::string(phase_name(c.phase))][c.op];
  return out;
}

std::map<std::string, std::map<std::string, int>> PlanResult::counts_by_module() const {
  std::map<std::string, std::map<std::string, int>> out;
  if (iterations.empty()) return out;
  for (const CollectiveRecord& c : iterations.back().collectives) ++out[c.module.empty() ? "<root>" : c.module][c.op];
  return out;
}

}  // namespace stratsim::core
