// CommDebugMode-style counts of a program's collectives: how many of each comm key
// ("c10d.allreduce_", "c10d_functional.all_gather_into_tensor") per iteration, broken down by
// phase, module and process group, with the bytes they move. The same counts `plan` prints for the
// last iteration (PlanResult::counts), derived from the program alone, so the viewer can show them
// for any timeline or program file.
//
//   for (const core::CollectiveCount& c : core::collective_counts(program))
//     std::cout << c.iteration << " " << c.comm_key << " x" << c.count << "\n";
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stratsim/core/program.hpp"

namespace stratsim::core {

struct CollectiveCount {
  int iteration = 1;
  Phase phase = Phase::forward;
  std::string module;    // module FQN, "" = root
  std::string group;     // the program group's name ("dp", "tp")
  std::string comm_key;  // CommDebugMode key
  CollectiveKind kind = CollectiveKind::all_reduce;
  int count = 0;
  std::int64_t bytes = 0;  // sum of the ops' logical bytes
  std::vector<int> ops;    // the op ids counted, in program order
};

// One row per distinct (iteration, comm_key, phase, module, group), sorted by those keys in that
// order (phases in execution order).
std::vector<CollectiveCount> collective_counts(const Program& program);

}  // namespace stratsim::core
