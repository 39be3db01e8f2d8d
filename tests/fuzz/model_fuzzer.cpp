// Model files (README "Model format"): the bytes as a JSON file and as a YAML file, then the
// model reader, then DDP planning over what it accepts (a model that reads must plan or be
// refused cleanly: shapes, sizes and costs feed the planner's arithmetic).
#include <cstddef>
#include <cstdint>

#include "fuzz_support.hpp"
#include "stratsim/core/model_io.hpp"
#include "stratsim/core/plan.hpp"
#include "stratsim/core/planner.hpp"

namespace stratsim::fuzz {
namespace {

void read_and_plan(const std::string& text, const std::string& origin, bool yaml) {
  const std::optional<core::Model> model = read_document_as(text, origin, yaml, core::parse_model);
  if (!model) return;
  static const core::Plan ddp = core::load_plan("builtin:ddp");
  accepted("", [&] { core::plan_training(*model, ddp); });
}

}  // namespace
}  // namespace stratsim::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  stratsim::fuzz::as_json_and_yaml(data, size, stratsim::fuzz::read_and_plan);
  return 0;
}
