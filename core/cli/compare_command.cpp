// stratsim compare PREDICTED MEASURED...: a prediction against a measurement (or two runs of any
// kind), with MEASURED taken as the reference.
// - Two JSON reports (simulate/run --json): per step, per collective op, per stream
//   (stratsim/core/comparison.hpp).
// - Otherwise, collective by collective: timelines (simulate/run --timeline) and PyTorch profiler
//   traces (one file per rank, or a folder of them), matched by rank, process group, kind,
//   sequence and bytes (stratsim/core/op_matching.hpp).
// The computations are core's; this file is its command line.
#include <memory>
#include <string>
#include <variant>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "stratsim/cli/command.hpp"
#include "stratsim/core/comparison.hpp"
#include "stratsim/core/document.hpp"
#include "stratsim/core/errors.hpp"
#include "stratsim/core/op_matching.hpp"
#include "stratsim/core/profiler_trace.hpp"

namespace stratsim::cli {
namespace {

struct CompareArgs {
  std::string predicted;
  std::vector<std::string> measured;
  bool json = false;
  std::string output;
  int top = 15;
};

// What one side of the comparison is.
using Input = std::variant<core::RunReport, core::Timeline, core::ProfilerTrace>;

std::string joined(const std::vector<std::string>& paths) {
  std::string out;
  for (const std::string& p : paths) out += (out.empty() ? "" : " ") + p;
  return out;
}

Input read_input(const std::vector<std::string>& paths) {
  if (paths.size() > 1) return core::read_profiler_trace(paths);
  core::Document read = core::read_document(paths.front());
  switch (read.kind) {
    case core::DocumentKind::run_report:
      return std::move(read.report);
    case core::DocumentKind::timeline:
      return std::move(read.timeline);
    case core::DocumentKind::profiler_trace:
      return std::move(read.trace);
    case core::DocumentKind::program:
      break;
  }
  throw core::InputError(
      fmt::format("{}: a program has no times to compare: simulate it (stratsim simulate --timeline) or run it first",
                  paths.front()));
}

core::CollectiveSide side_of(const Input& input, const std::string& file, const std::vector<int>& ranks) {
  if (const auto* trace = std::get_if<core::ProfilerTrace>(&input)) return core::trace_side(*trace, file);
  if (const auto* timeline = std::get_if<core::Timeline>(&input)) return core::timeline_side(*timeline, file, ranks);
  throw core::InputError(fmt::format(
      "{}: a run report has no per-collective times: compare op by op needs a timeline (simulate/run --timeline) "
      "or a profiler trace on both sides",
      file));
}

std::string compare_ops(const Input& predicted, const Input& measured, const CompareArgs& args) {
  const std::string measured_name = joined(args.measured);
  // The measured side first: the predicted one is expanded on the ranks it has.
  const core::CollectiveSide m = side_of(measured, measured_name, {});
  const core::CollectiveSide p = side_of(predicted, args.predicted, m.ranks);
  const core::OpComparison comparison = core::match_collectives(p, m);
  return args.json ? core::op_comparison_json(comparison, p, m).dump(2) + "\n"
                   : core::op_comparison_text(comparison, p, m, args.top);
}

int run_compare(const CompareArgs& args) {
  const Input predicted = read_input({args.predicted});
  const Input measured = read_input(args.measured);
  std::string report;
  const auto* a = std::get_if<core::RunReport>(&predicted);
  const auto* b = std::get_if<core::RunReport>(&measured);
  if (a && b) {
    const core::Comparison comparison = core::compare_runs(*a, *b);
    report = args.json ? core::comparison_json(comparison).dump(2) + "\n" : core::comparison_text(comparison, args.top);
  } else {
    report = compare_ops(predicted, measured, args);
  }
  write_or_print(args.output, report);
  return 0;
}

const Register compare_registration("compare", [](CLI::App& app) {
  auto args = std::make_shared<CompareArgs>();
  CLI::App* cmd = app.add_subcommand(
      "compare",
      "Compare a prediction with a measurement: two JSON reports, or collective by collective timelines and "
      "PyTorch profiler traces");
  cmd->add_option("predicted", args->predicted,
                  "Taken as the prediction: a JSON report (simulate --json), a timeline (simulate --timeline) or a "
                  "profiler trace")
      ->required();
  cmd->add_option("measured", args->measured,
                  "Taken as the reference: a JSON report (run --json), a timeline (run --timeline), or a PyTorch "
                  "profiler trace: one file per rank (.json or .json.gz), or a folder of them")
      ->required();
  cmd->add_flag("--json", args->json, "Write the comparison as JSON");
  cmd->add_option("-o,--output", args->output, "Write to this file instead of standard output");
  cmd->add_option("--top", args->top, "Rows to list in the largest-error and unmatched tables")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  return Subcommand{cmd, [args] { return run_compare(*args); }};
});

}  // namespace
}  // namespace stratsim::cli
