// stratsim simulate: plan a model, run the program on a modelled cluster, report and write traces.
// stratsim platforms: list the built-in platforms, or describe one.
#include <unistd.h>

#include <cmath>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "stratsim/cli/command.hpp"
#include "stratsim/core/errors.hpp"
#include "stratsim/core/model_io.hpp"
#include "stratsim/core/plan.hpp"
#include "stratsim/core/planner.hpp"
#include "stratsim/core/run_analysis.hpp"
#include "stratsim/core/trace.hpp"
#include "stratsim/sim/platform.hpp"
#include "stratsim/sim/simulator.hpp"

namespace stratsim::cli {
namespace {

using core::InputError;

struct SimulateArgs {
  std::string model = "zoo:Net";
  std::string plan = "builtin:ddp";
  std::string platform = "h100";
  int iterations = 0;
  bool json = false;
  std::string output;
  std::string trace;
  std::string timeline;
  std::vector<std::string> algorithms;  // kind=algorithm
  std::string compute_model;
  std::string ranks = "auto";
  bool no_fold = false;
  std::vector<std::string> stragglers;  // rank=factor
  bool quiet = false;
  bool progress = false;
};

std::map<core::CollectiveKind, sim::Algorithm> parse_algorithms(const std::vector<std::string>& items) {
  // Named as the core names them (collective_kind_name), so the two never drift apart.
  std::map<std::string, core::CollectiveKind, std::less<>> kinds;
  for (core::CollectiveKind kind :
       {core::CollectiveKind::all_reduce, core::CollectiveKind::all_gather, core::CollectiveKind::reduce_scatter,
        core::CollectiveKind::broadcast, core::CollectiveKind::all_to_all})
    kinds.emplace(core::collective_kind_name(kind), kind);
  std::map<core::CollectiveKind, sim::Algorithm> result;
  for (const std::string& item : items) {
    const auto eq = item.find('=');
    const std::string kind = item.substr(0, eq), name = eq == std::string::npos ? "" : item.substr(eq + 1);
    const auto k = kinds.find(kind);
    if (eq == std::string::npos || k == kinds.end())
      throw InputError(
          fmt::format("--algorithm {}: expected KIND=ALGORITHM with KIND one of all_reduce, all_gather, "
                      "reduce_scatter, broadcast, all_to_all",
                      item));
    const auto algorithm = sim::parse_algorithm(name);
    if (!algorithm)
      throw InputError(
          fmt::format("--algorithm {}: unknown algorithm \"{}\" (expected auto, ring, tree, rhd, direct, "
                      "hierarchical, nvls, nvls_tree, chain)",
                      item, name));
    if (*algorithm != sim::Algorithm::automatic && !sim::implements(*algorithm, k->second))
      throw InputError(fmt::format("--algorithm {}: {} does not implement {}", item, name, kind));
    result[k->second] = *algorithm;
  }
  return result;
}

std::map<int, double> parse_stragglers(const std::vector<std::string>& items) {
  std::map<int, double> result;
  for (const std::string& item : items) {
    const auto eq = item.find('=');
    try {
      std::size_t used = 0;
      if (eq == std::string::npos) throw std::invalid_argument(item);
      const int rank = std::stoi(item.substr(0, eq), &used);
      if (used != eq) throw std::invalid_argument(item);
      const double factor = std::stod(item.substr(eq + 1), &used);
      if (used != item.size() - eq - 1) throw std::invalid_argument(item);
      result[rank] = factor;
    } catch (const std::logic_error&) {
      throw InputError(
          fmt::format("--straggler {}: expected RANK=FACTOR, e.g. 3=1.5 (rank 3 computes 1.5x slower)", item));
    }
  }
  return result;
}

sim::RankMode parse_mode(const std::string& text) {
  if (text == "auto") return sim::RankMode::automatic;
  if (text == "representative") return sim::RankMode::representative;
  if (text == "full") return sim::RankMode::full;
  throw InputError(fmt::format("--ranks {}: expected auto, representative or full", text));
}

int run_simulate(const SimulateArgs& args) {
  check_outputs_writable({args.json, args.output, args.trace, args.timeline});
  const core::Model model = core::load_model(args.model);
  const core::Plan plan = core::load_plan(args.plan);
  sim::PlatformSpec platform = sim::parse_platform(args.platform);
  sim::SimOptions options;
  options.algorithms = parse_algorithms(args.algorithms);
  options.mode = parse_mode(args.ranks);
  options.fold = !args.no_fold;
  options.stragglers = parse_stragglers(args.stragglers);
  if (!args.compute_model.empty()) {
    platform.cost.compute.apply_overrides(args.compute_model);
    sim::check_power_limit(platform);  // the new model must have a figure for power_w too
  }
  options.progress = !args.quiet && (args.progress || ::isatty(STDERR_FILENO));
  core::PlanOptions plan_options;
  plan_options.iterations = args.iterations;
  const core::PlanResult planned = core::plan_training(model, plan, plan_options);
  const sim::SimResult result = sim::simulate(planned.program, platform, options);
  // Host time on stderr: the report itself is byte-identical for the same inputs.
  if (!args.quiet)
    std::cerr << fmt::format("stratsim simulate: simulated in {}\n", core::format_seconds(result.wall_seconds));
  write_run_outputs({args.json, args.output, args.trace, args.timeline}, planned.program, result,
                    core::workload_of(model, plan));
  return 0;
}

int run_platforms(const std::string& name) {
  if (!name.empty()) {
    std::cout << sim::describe_platform(sim::parse_platform(name)) << "\n";
    return 0;
  }
  std::cout << "Built-in platforms (use as --platform NAME or NAME:key=value,...; or a SimGrid .xml file, or a "
               ".json/.yaml description):\n";
  for (const sim::PresetInfo& preset : sim::platform_presets()) {
    std::cout << fmt::format("  {:<8} {}\n", preset.name, preset.description);
    if (!preset.options.empty()) std::cout << fmt::format("  {:<8}   options: {}\n", "", preset.options);
  }
  return 0;
}

const Register simulate_command("simulate", [](CLI::App& app) {
  auto args = std::make_shared<SimulateArgs>();
  CLI::App* cmd = app.add_subcommand("simulate", "Simulate the plan's training steps on a modelled cluster (SimGrid)");
  cmd->add_option("--model", args->model, "Model file (JSON/YAML) or zoo:NAME[:key=value,...]")->capture_default_str();
  cmd->add_option("--plan", args->plan, "Plan file (JSON/YAML) or builtin:NAME")->capture_default_str();
  cmd->add_option("--platform", args->platform,
                  "Platform: preset[:key=value,...], SimGrid .xml or .json/.yaml file (see `stratsim platforms`)")
      ->capture_default_str();
  cmd->add_option("--iterations", args->iterations, "Training micro-steps (default: the plan's, else 3)")
      ->check(CLI::Range(1, 1000));
  cmd->add_flag("--json", args->json, "Write the JSON report instead of text");
  cmd->add_option("-o,--output", args->output, "Write the report to this file instead of standard output");
  cmd->add_option("--trace", args->trace, "Write a Chrome-trace JSON timeline (Perfetto, chrome://tracing, HTA)");
  cmd->add_option("--timeline", args->timeline, "Write the stratsim timeline JSON (the viewer's format)");
  cmd->add_option("--algorithm", args->algorithms,
                  "Force an algorithm: KIND=ring|tree|chain|rhd|direct|hierarchical|nvls|nvls_tree|auto (repeatable)");
  cmd->add_option("--compute-model", args->compute_model,
                  "JSON/YAML file overriding the roofline efficiencies per op class");
  cmd->add_option("--ranks", args->ranks,
                  "auto | representative (one simulated rank stands for all) | full (every rank)")
      ->capture_default_str();
  cmd->add_option("--straggler", args->stragglers,
                  "RANK=FACTOR: that rank computes FACTOR times slower (repeatable; full mode)");
  cmd->add_flag("--no-fold", args->no_fold,
                "Representative mode: simulate every node's flows instead of folding the network by node symmetry");
  cmd->add_flag("--quiet", args->quiet, "No progress bar");
  cmd->add_flag("--progress", args->progress,
                "Draw the progress bar even when stderr is not a terminal (for a program that reads it)");
  return Subcommand{cmd, [args] { return run_simulate(*args); }};
});

const Register platforms_command("platforms", [](CLI::App& app) {
  auto name = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("platforms", "List the built-in platforms, or describe one");
  cmd->add_option("name", *name, "Platform to describe (preset[:key=value,...] or file)");
  return Subcommand{cmd, [name] { return run_platforms(*name); }};
});

}  // namespace
}  // namespace stratsim::cli
