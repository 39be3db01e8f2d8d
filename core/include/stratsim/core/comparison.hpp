// Two runs of the same program side by side: a prediction (a simulation) against a reference (a
// measured run, or another simulation), per step, per collective op and per stream, with
// error = (predicted - measured) / measured. Reads the JSON reports `simulate --json` and
// `run --json` write; `stratsim compare` prints it, and the viewer shows it.
//
//   const auto predicted = core::load_run_report("sim.json"), measured = core::load_run_report("real.json");
//   const core::Comparison comparison = core::compare_runs(predicted, measured);
//   std::cout << core::comparison_text(comparison, /*top=*/15);
//   comparison.mean_abs_step_error();  // the headline figure, std::nullopt when nothing to compare
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace stratsim::core {

// A JSON report ("format": "stratsim.simulation", version 1) and the file it came from.
struct RunReport {
  std::string file;
  nlohmann::json document;
};

// Reads and validates a report; throws InputError naming the file and field.
RunReport load_run_report(const std::string& path);
// Validates a report already in memory (origin names it in errors).
RunReport run_report_from_json(nlohmann::json document, const std::string& origin);

struct ComparisonRow {
  std::string label;   // "1" (iteration), "ddp.bucket0" (op), "compute" (stream)
  std::string detail;  // kind, bytes and group size for collectives
  double predicted = 0, measured = 0;
  std::optional<double> error() const;  // (predicted - measured) / measured; none when measured is 0
};

struct ComparedRun {
  std::string file, mode, platform;
};

struct Comparison {
  ComparedRun predicted, measured;
  std::vector<ComparisonRow> steps;        // step time per iteration
  std::vector<ComparisonRow> collectives;  // mean duration per instance of each collective op, by op id
  std::vector<ComparisonRow> streams;      // busy time per stream, first rank entry

  std::optional<double> mean_abs_step_error() const;
  std::optional<double> mean_abs_collective_error() const;
};

// Throws InputError when the two are not runs of the same program (world size, iterations,
// collective ops by id and name).
Comparison compare_runs(const RunReport& predicted, const RunReport& measured);

// The mean |error| over rows that have one.
std::optional<double> mean_abs_error(const std::vector<ComparisonRow>& rows);
// The rows with the largest |error| first, at most `top`.
std::vector<ComparisonRow> largest_errors(std::vector<ComparisonRow> rows, int top);

// How the comparisons write an error: "+12.3%" (signed), "12.3%" (a magnitude), "-" when there is
// none; in JSON a number, or null.
std::string format_error(const std::optional<double>& error);
std::string format_error_magnitude(const std::optional<double>& error);
nlohmann::json error_json(const std::optional<double>& error);

std::string comparison_text(const Comparison& comparison, int top);
nlohmann::json comparison_json(const Comparison& comparison);  // "format": "stratsim.comparison", version 1

}  // namespace stratsim::core
