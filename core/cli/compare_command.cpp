// stratsim compare A.json B.json: two JSON reports of the same program (a simulation and a
// measured run, or two simulations) side by side, with B taken as the reference. The computation
// is core's (stratsim/core/comparison.hpp); this file is its command line.
#include <iostream>
#include <memory>
#include <string>

#include "stratsim/cli/command.hpp"
#include "stratsim/core/comparison.hpp"

namespace stratsim::cli {
namespace {

struct CompareArgs {
  std::string predicted, measured;
  bool json = false;
  std::string output;
  int top = 15;
};

int run_compare(const CompareArgs& args) {
  const core::Comparison comparison =
      core::compare_runs(core::load_run_report(args.predicted), core::load_run_report(args.measured));
  const std::string report =
      args.json ? core::comparison_json(comparison).dump(2) + "\n" : core::comparison_text(comparison, args.top);
  if (!args.output.empty()) write_atomically(args.output, report);
  else std::cout << report;
  return 0;
}

const Register compare_registration("compare", [](CLI::App& app) {
  auto args = std::make_shared<CompareArgs>();
  CLI::App* cmd = app.add_subcommand("compare", "Compare two JSON reports of the same program: predicted vs measured");
  cmd->add_option("predicted", args->predicted, "JSON report taken as the prediction (e.g. stratsim simulate --json)")
      ->required();
  cmd->add_option("measured", args->measured, "JSON report taken as the reference (e.g. stratsim run --json)")
      ->required();
  cmd->add_flag("--json", args->json, "Write the comparison as JSON");
  cmd->add_option("-o,--output", args->output, "Write to this file instead of standard output");
  cmd->add_option("--top", args->top, "Collective ops to list (largest errors first)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  return Subcommand{cmd, [args] { return run_compare(*args); }};
});

}  // namespace
}  // namespace stratsim::cli
