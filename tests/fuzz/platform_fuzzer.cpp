// Platform descriptions (README "Platforms": a preset and its options, `cost_model:` inline or a
// file) as JSON and as YAML; what reads is described and then simulated with a small DDP program,
// so the numbers it accepts (bandwidths, latencies, node counts, cost-model curves) reach
// SimGrid's platform builder and the cost model in the simulation process.
#include <cstddef>
#include <cstdint>

#include "fuzz_support.hpp"
#include "stratsim/core/model_io.hpp"
#include "stratsim/core/plan.hpp"
#include "stratsim/core/planner.hpp"
#include "stratsim/sim/platform.hpp"
#include "stratsim/sim/simulator.hpp"

namespace stratsim::fuzz {
namespace {

constexpr int kSimulatedDevices = 1024;

const core::Program& small_program() {
  static const core::Program program =
      core::plan_training(core::load_model("zoo:SimpleMLP"), core::load_plan("builtin:ddp")).program;
  return program;
}

void read_and_simulate(const std::string& text, const std::string& origin, bool yaml) {
  sim::PlatformSpec platform;
  const bool read = accepted(origin, [&] {
    platform = sim::platform_from_document(core::parse_document(text, origin, yaml), origin);
    sim::describe_platform(platform);
  });
  // A platform of tens of thousands of devices is valid, and SimGrid takes seconds to build it
  // under the sanitizers: past the fuzzer's per-input timeout. Fuzzing is after the numbers' edge
  // cases, which a small platform reaches as well.
  if (!read || platform.device_count() > kSimulatedDevices) return;
  accepted("", [&] { sim::simulate(small_program(), platform); });
}

}  // namespace
}  // namespace stratsim::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = stratsim::fuzz::text_of(data, size);
  stratsim::fuzz::read_and_simulate(text, "fuzz.json", false);
  stratsim::fuzz::read_and_simulate(text, "fuzz.yaml", true);
  return 0;
}
