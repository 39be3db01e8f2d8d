// Opening any document stratsim writes, by its "format" field: a timeline (simulate/run
// --timeline), a run report (simulate/run --json) or a program (plan --emit-program); and a
// PyTorch profiler trace (a Chrome trace with "traceEvents", .json or .json.gz, or a folder of
// per-rank traces: profiler_trace.hpp). The viewer
// opens files through this, so it has no JSON parser of its own and reports bad input in the
// CLI's words.
//
//   const core::Document doc = core::read_document("run.json", [&](double done) { bar.set(done); return !cancelled; });
//   if (doc.kind == core::DocumentKind::timeline) show(doc.timeline);
#pragma once

#include <functional>
#include <stdexcept>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "stratsim/core/comparison.hpp"
#include "stratsim/core/profiler_trace.hpp"
#include "stratsim/core/program.hpp"
#include "stratsim/core/timeline.hpp"

namespace stratsim::core {

enum class DocumentKind { timeline, run_report, program, profiler_trace };

// The member `kind` names is filled; the others stay empty.
struct Document {
  DocumentKind kind = DocumentKind::timeline;
  std::string origin;
  Timeline timeline;
  RunReport report;
  Program program;
  ProfilerTrace trace;
};

// read_document's progress callback returned false.
class ReadCancelled : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Called now and then from the reading thread with the fraction done in [0, 1]; return false to
// cancel (read_document then throws ReadCancelled).
using ReadProgress = std::function<bool(double fraction)>;

// Reads and validates FILE (gzipped or not), or a folder of profiler traces; throws InputError
// ("FILE: FIELD.PATH: what was expected") on bad input.
Document read_document(const std::string& path, const ReadProgress& progress = {});
// The same for a document already parsed; `origin` names it in errors.
Document document_from_json(nlohmann::json document, const std::string& origin);

}  // namespace stratsim::core
