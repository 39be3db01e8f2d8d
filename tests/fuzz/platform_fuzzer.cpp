// Platform descriptions (README "Platforms": a preset and its options, `cost_model:` inline or a
// file) as JSON and as YAML; what reads is described and then simulated with a small DDP program,
// so the numbers it accepts (bandwidths, latencies, node counts, cost-model curves) reach
// SimGrid's platform builder and the cost model in the simulation process.
#include <cstddef>
#include <cstdint>

#include "fuzz_support.hpp"
#include "stratsim/sim/platform.hpp"
#include "stratsim/sim/simulator.hpp"

namespace stratsim::fuzz {
namespace {

constexpr int kSimulatedDevices = 1024;

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
  accepted("", [&] { sim::simulate(small_ddp_program(), platform); });
}

}  // namespace
}  // namespace stratsim::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  stratsim::fuzz::as_json_and_yaml(data, size, stratsim::fuzz::read_and_simulate);
  return 0;
}
