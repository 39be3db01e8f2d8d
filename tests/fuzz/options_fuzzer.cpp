// Option strings: `--platform PRESET:key=value,...` (a preset with its options) and
// `--model zoo:NAME:key=value,...` (a built-in model with its sizes), plus the placement and dtype
// strings plans and documents use. A zoo model that reads is planned under DDP when it is small
// enough to plan in a fuzzing iteration.
#include <cctype>
#include <cstddef>
#include <cstdint>

#include "fuzz_support.hpp"
#include "stratsim/core/dtype.hpp"
#include "stratsim/core/model_io.hpp"
#include "stratsim/core/placement.hpp"
#include "stratsim/core/plan.hpp"
#include "stratsim/core/planner.hpp"
#include "stratsim/sim/platform.hpp"

namespace stratsim::fuzz {
namespace {

// parse_platform() trims, then reads a file by its suffix.
bool names_a_file(std::string text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const std::string suffix : {".xml", ".json", ".yaml", ".yml"})
    if (text.ends_with(suffix)) return true;
  return false;
}

constexpr std::size_t kPlannableModules = 200;

void use(const std::string& text) {
  if (!names_a_file(text))  // a file name would read the machine's files, not fuzz the option parser
    accepted("", [&] { sim::describe_platform(sim::parse_platform(text)); });
  core::Model model;
  if (accepted("zoo:", [&] { model = core::load_model("zoo:" + text); }) && model.modules.size() <= kPlannableModules) {
    static const core::Plan ddp = core::load_plan("builtin:ddp");
    accepted("", [&] { core::plan_training(model, ddp); });
  }
  (void)core::parse_placement(text);
  (void)core::parse_dtype(text);
}

}  // namespace
}  // namespace stratsim::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  stratsim::fuzz::use(stratsim::fuzz::text_of(data, size));
  return 0;
}
