// The SimGrid side of simulate(): runs inside the simulation process (one engine per process).
#pragma once

#include <functional>

#include "stratsim/core/program.hpp"
#include "stratsim/sim/platform.hpp"
#include "stratsim/sim/simulator.hpp"

namespace stratsim::sim::detail {

// Throws core::InputError when the platform has fewer devices than the program has ranks.
void require_devices(const PlatformSpec& platform, int devices, int world_size);

// Resolves the rank mode: representative unless stragglers ask for per-rank behaviour.
RankMode effective_mode(const SimOptions& options);

// What the simulation process tells its parent besides the result.
struct EngineHooks {
  std::function<void()> platform_built;  // runs once the platform is built (a later death is not the file's)
  int log_fd = -1;                       // SimGrid's log goes here, one message per line, when >= 0
};

// Creates the SimGrid engine, builds the platform, runs the program and returns the timings.
// Throws core::InputError for impossible mappings. Must be called at most once per process.
SimResult run_engine(const core::Program& program, const PlatformSpec& platform, const SimOptions& options,
                     const EngineHooks& hooks = {});

// A compact binary form of SimResult for the pipe between the simulation process and its parent.
std::string serialize(const SimResult& result);
SimResult deserialize(const std::string& bytes);

}  // namespace stratsim::sim::detail
