// A document read the way the viewer and `stratsim compare` use it, shared by the document fuzz
// target and tests/core/document_fuzz_test.cpp: whatever document_from_json() accepts must then
// analyse, report, export and write back without a crash. A broken property throws
// fuzz::Broken.
#pragma once

#include <nlohmann/json.hpp>

#include "fuzz_support.hpp"
#include "stratsim/core/collective_counts.hpp"
#include "stratsim/core/comparison.hpp"
#include "stratsim/core/document.hpp"
#include "stratsim/core/errors.hpp"
#include "stratsim/core/run_analysis.hpp"
#include "stratsim/core/trace.hpp"
#include "stratsim/core/trace_timeline.hpp"

namespace stratsim::fuzz {

inline void use_timeline(const core::Timeline& t, const std::string& origin) {
  const core::Analysis analysis = core::analyse(t.program, t.result, {8, 1024});
  core::text_report(t.program, t.result, analysis);
  core::json_report(t.program, t.result, analysis);
  core::analyse_window(t.program, t.result, 0.25 * analysis.makespan, 0.75 * analysis.makespan);
  core::chrome_trace(t.program, t.result);
  // A v1 file's groups have no mesh dims, so only v2 timelines can be written back.
  if (t.version == 2) {
    const core::Timeline back =
        core::timeline_from_json(nlohmann::json::parse(core::timeline_json(t.program, t.result).dump()), origin);
    require(back.program.ops.size() == t.program.ops.size(), "a timeline written back lost ops");
  }
  core::collective_counts(t.program);
}

// `stratsim compare` reads its reports without the document dispatch: the same rule.
inline void compare_with_itself(const nlohmann::json& doc, const std::string& origin) {
  core::RunReport report;
  if (!accepted(origin, [&] { report = core::run_report_from_json(doc, origin); })) return;
  try {
    core::comparison_text(core::compare_runs(report, report), 15);
  } catch (const core::InputError&) {
  }
}

// Reading either succeeds or throws InputError; what reads is used.
inline void read_and_use(const nlohmann::json& doc, const std::string& origin) {
  compare_with_itself(doc, origin);
  core::Document document;
  if (!accepted(origin, [&] { document = core::document_from_json(doc, origin); })) return;
  switch (document.kind) {
    case core::DocumentKind::timeline:
      use_timeline(document.timeline, origin);
      break;
    case core::DocumentKind::program:
      core::collective_counts(document.program);
      core::program_from_json(core::program_to_json(document.program), origin);
      break;
    case core::DocumentKind::profiler_trace:
      use_timeline(core::trace_timeline(document.trace).timeline, origin);
      break;
    case core::DocumentKind::run_report:
      try {
        core::comparison_text(core::compare_runs(document.report, document.report), 15);
      } catch (const core::InputError&) {
      }
      break;
  }
}

}  // namespace stratsim::fuzz
