// Small views of a RunResult that the reports and the timelines share (not installed).
#pragma once

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "stratsim/core/json_reader.hpp"
#include "stratsim/core/program.hpp"
#include "stratsim/core/run_result.hpp"

namespace stratsim::core::detail {

// Simulated runs keep the wording and format names the simulator has always written; measured
// runs name their source instead.
inline bool is_simulated(const RunResult& result) { return result.source == "simulation"; }

// The ranks recorded rank s stands for; itself when the result does not say (hand-made results).
inline std::vector<int> ranks_of(const RunResult& result, std::size_t s) {
  if (s < result.recorded.size() && !result.recorded[s].empty()) return result.recorded[s];
  return {static_cast<int>(s)};
}

// The program group's name of a collective op, "" when the op has none.
inline std::string group_name(const Program& program, const ProgramOp& op) {
  return op.group >= 0 && static_cast<std::size_t>(op.group) < program.groups.size() ? program.groups[op.group].name
                                                                                     : "";
}

// Every link of the result, in its order: the "links" array of the JSON report and the timeline.
inline nlohmann::json links_json(const std::vector<LinkLoad>& links) {
  nlohmann::json out = nlohmann::json::array();
  for (const LinkLoad& link : links)
    out.push_back({{"name", link.name},
                   {"bandwidth_GBps", link.bandwidth / 1e9},
                   {"bytes", link.bytes},
                   {"utilisation", link.utilisation}});
  return out;
}

// Times a run can hold: a billion seconds either way keeps every consumer's arithmetic (integer
// nanoseconds in the Chrome trace, pixels in the viewer) in range.
inline constexpr double kMaxTime = 1e9;
inline constexpr const char* kTimeExpected = "expected a time within 1e9 seconds of the run's origin";

inline double read_time(const JsonReader& node) {
  const double seconds = node.as_number();
  if (!(std::fabs(seconds) <= kMaxTime)) node.fail(kTimeExpected);
  return seconds;
}

}  // namespace stratsim::core::detail
