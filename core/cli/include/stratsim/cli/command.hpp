// Subcommand registry of the stratsim binary (library stratsim_cli). Each layer (sim, exec) defines
// its subcommands in its own cli/ sources, an object library that links stratsim_cli, with a
// static Register object, so core's main() lists them without depending on the layers above it;
// the top-level CMakeLists.txt links them all into `stratsim`.
//
//   const stratsim::cli::Register hello("hello", [](CLI::App& app) {
//     CLI::App* cmd = app.add_subcommand("hello", "Say hello");
//     return stratsim::cli::Subcommand{cmd, [] { std::puts("hello"); return 0; }};
//   });
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "stratsim/cli/output_files.hpp"
#include "stratsim/core/run_analysis.hpp"
#include "stratsim/core/run_result.hpp"

namespace stratsim::cli {

// Adds a subcommand to `app` and returns the function that runs it once parsed (exit status).
struct Subcommand {
  CLI::App* app = nullptr;
  std::function<int()> run;
};
using Registrar = std::function<Subcommand(CLI::App& app)>;

inline std::vector<std::pair<std::string, Registrar>>& registrars() {
  static std::vector<std::pair<std::string, Registrar>> all;
  return all;
}

struct Register {
  Register(std::string name, Registrar registrar) { registrars().emplace_back(std::move(name), std::move(registrar)); }
};

// A number option that must be finite and at least `low` (CLI11's PositiveNumber and Range let NaN
// through: every comparison with it is false).
CLI::Validator finite_at_least(double low, bool strictly = false);

// Prints "stratsim: error: MESSAGE" on stderr in one write, so the errors of ranks that fail at
// once (stratsim run) never interleave mid-line.
void print_error(const std::string& message);

// Where a run's outputs go (simulate, run): the report as text or JSON, to `output` or stdout,
// plus an optional Chrome trace and timeline.
struct RunOutputs {
  bool json = false;
  std::string output, trace, timeline;
};
// check_writable() for a run's outputs.
void check_outputs_writable(const RunOutputs& outputs);
// Analyses the run, renders everything, then writes all of it or nothing.
void write_run_outputs(const RunOutputs& outputs, const core::Program& program, const core::RunResult& result,
                       const core::Workload& workload);
// The same with a report the caller rendered (stratsim run --train's parity report); the workload
// goes into the timeline, for the viewer's throughput.
void write_run_outputs(const RunOutputs& outputs, const core::Program& program, const core::RunResult& result,
                       const std::string& report, const core::Workload& workload);

}  // namespace stratsim::cli
