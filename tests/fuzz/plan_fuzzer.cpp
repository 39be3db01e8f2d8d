// Plan files (README "Plan format"): the bytes as JSON and as YAML, then the plan reader, then
// planning over the models whose module names the committed plans use (the seeds' SimpleModel,
// TestModel and CompositeParamModel, and a small Llama-style decoder for torchtitan-style plans), so composition rules,
// meshes and TP styles are checked against real module trees.
#include <cstddef>
#include <cstdint>

#include "fuzz_support.hpp"
#include "stratsim/core/model_io.hpp"
#include "stratsim/core/plan.hpp"
#include "stratsim/core/planner.hpp"

namespace stratsim::fuzz {
namespace {

const std::vector<core::Model>& models() {
  static const std::vector<core::Model> all = {
      core::load_model("zoo:SimpleModel"),
      core::load_model("zoo:TestModel"),
      core::load_model("zoo:CompositeParamModel"),
      core::load_model("zoo:gpt:layers=2,hidden=64,heads=4,ffn=128,vocab=256,seq=16"),
  };
  return all;
}

void read_and_plan(const std::string& text, const std::string& origin, bool yaml) {
  const std::optional<core::Plan> plan = read_document_as(text, origin, yaml, core::parse_plan);
  if (!plan) return;
  for (const core::Model& model : models()) accepted("", [&] { core::plan_training(model, *plan); });
}

}  // namespace
}  // namespace stratsim::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  stratsim::fuzz::as_json_and_yaml(data, size, stratsim::fuzz::read_and_plan);
  return 0;
}
