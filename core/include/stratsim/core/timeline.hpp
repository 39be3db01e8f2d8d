// The project's own timeline of a run ("stratsim.timeline"), in both directions: what
// `simulate --timeline` and `run --timeline` write and what the viewer reads back. Version 2
// carries the whole program and the whole RunResult, so a file re-runs analyse() exactly as the
// producer did; version 1 files (ops with times, no op class, FLOPs or groups' mesh dims) still
// read, with what they lack left at its default. Layout: docs/formats/timeline.md and
// docs/formats/timeline-v2.schema.json.
//
//   const nlohmann::json doc = core::timeline_json(program, result);            // write
//   const core::Timeline back = core::timeline_from_json(doc, "run.json");      // read: v1 or v2
//   core::analyse(back.program, back.result, workload);                         // same figures
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "stratsim/core/program.hpp"
#include "stratsim/core/run_analysis.hpp"
#include "stratsim/core/run_result.hpp"

namespace stratsim::core {

struct Timeline {
  Program program;
  RunResult result;
  Workload workload;  // what one step processes, for throughput; zeros when the file does not say
  int version = 2;    // the version the document was written in
};

// stratsim.timeline v2: {"format", "version": 2, "program": program_to_json, "run":
// run_result_to_json, "workload": {"samples_per_step", "tokens_per_sample"}}.
nlohmann::json timeline_json(const Program& program, const RunResult& result, const Workload& workload = {});

// Reads v1 or v2; throws InputError naming `origin` and the field path.
Timeline timeline_from_json(const nlohmann::json& document, const std::string& origin);

}  // namespace stratsim::core
