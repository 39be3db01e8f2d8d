// stratsim: the command-line front end. Subcommands: plan, zoo here; simulate, platforms (sim/cli)
// and others register through command.hpp.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <new>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "stratsim/cli/command.hpp"

#include "stratsim/core/errors.hpp"
#include "stratsim/core/model_io.hpp"
#include "stratsim/core/plan.hpp"
#include "stratsim/core/planner.hpp"
#include "stratsim/core/report.hpp"
#include "stratsim/core/trace.hpp"

namespace {

using namespace stratsim::core;
using stratsim::cli::write_all_or_nothing;

struct PlanArgs {
  std::string model = "zoo:Net";
  std::string plan = "builtin:ddp";
  int iterations = 0;
  int rank = 0;
  bool json = false;
  std::string output;
  std::string emit_program;
  std::string memory_history;
};

int run_plan(const PlanArgs& args) {
  stratsim::cli::check_writable({args.output, args.emit_program, args.memory_history});
  const Model model = load_model(args.model);
  const Plan plan = load_plan(args.plan);
  PlanOptions options;
  options.rank = args.rank;
  options.iterations = args.iterations;
  const PlanResult result = plan_training(model, plan, options);
  // Render everything before writing anything.
  const std::string report =
      args.json ? json_report(model, plan, result).dump(2) + "\n" : text_report(model, plan, result);
  const std::string program = args.emit_program.empty() ? "" : program_to_json(result.program).dump(1) + "\n";
  std::vector<std::pair<std::string, std::string>> files;
  if (!args.emit_program.empty()) files.emplace_back(args.emit_program, program);
  if (!args.memory_history.empty())
    files.emplace_back(args.memory_history, memory_history_document(result).dump() + "\n");
  if (!args.output.empty()) files.emplace_back(args.output, report);
  write_all_or_nothing(files);
  if (args.output.empty()) std::cout << report;
  return 0;
}

int run_zoo(const std::string& name) {
  if (!name.empty()) {
    std::cout << zoo_document(name.starts_with("zoo:") ? name : "zoo:" + name).dump(2) << "\n";
    return 0;
  }
  std::cout << "Built-in models (use as --model zoo:NAME or zoo:NAME:key=value,...):\n";
  for (const ZooEntry& entry : zoo()) {
    std::cout << fmt::format("  {:<24} {}\n", entry.name, entry.description);
    if (!entry.parameters.empty()) std::cout << fmt::format("  {:<24}   options: {}\n", "", entry.parameters);
  }
  std::cout << "Built-in plans (use as --plan builtin:NAME):";
  for (const std::string& plan : builtin_plan_names()) std::cout << " " << plan;
  std::cout << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"stratsim: plan, simulate and run distributed training strategies"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "stratsim 0.1.0");

  PlanArgs plan_args;
  CLI::App* plan = app.add_subcommand(
      "plan", "Turn a model and a parallelism plan into PyTorch's collectives and a per-rank program");
  plan->add_option("--model", plan_args.model, "Model file (JSON/YAML) or zoo:NAME[:key=value,...]")
      ->capture_default_str();
  plan->add_option("--plan", plan_args.plan, "Plan file (JSON/YAML) or builtin:NAME")->capture_default_str();
  plan->add_option("--iterations", plan_args.iterations, "Training micro-steps to plan (default: the plan's, else 3)")
      ->check(CLI::Range(1, 1000));
  plan->add_option("--rank", plan_args.rank, "Rank whose view to report")->check(CLI::NonNegativeNumber);
  plan->add_flag("--json", plan_args.json, "Write the documented JSON report instead of text");
  plan->add_option("-o,--output", plan_args.output, "Write the report to this file instead of standard output");
  plan->add_option("--emit-program", plan_args.emit_program, "Write the program (JSON) to this file");
  plan->add_option("--memory-history", plan_args.memory_history,
                   "Write the rank's allocation history (JSON, as `stratsim allocator` reads it) to this file");

  std::string zoo_name;
  CLI::App* zoo_cmd = app.add_subcommand("zoo", "List built-in models, or print one as a model document");
  zoo_cmd->add_option("name", zoo_name, "Model to print (zoo:NAME[:options])");

  std::vector<stratsim::cli::Subcommand> layer_commands;
  auto& registrars = stratsim::cli::registrars();
  std::sort(registrars.begin(), registrars.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [name, registrar] : registrars) layer_commands.push_back(registrar(app));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    if (error.get_exit_code() == 0) return app.exit(error);  // --help, --version
    stratsim::cli::print_error(std::string(error.what()) + " (see --help)");
    return 2;
  }
  try {
    if (plan->parsed()) return run_plan(plan_args);
    if (zoo_cmd->parsed()) return run_zoo(zoo_name);
    for (const auto& command : layer_commands)
      if (command.app->parsed()) return command.run();
  } catch (const InputError& error) {
    stratsim::cli::print_error(error.what());
    return 2;
  } catch (const PlanError& error) {
    stratsim::cli::print_error(error.what());
    return 2;
  } catch (const std::bad_alloc&) {
    stratsim::cli::print_error("out of memory: the model, plan or platform is too large for this machine");
    return 1;
  } catch (const std::exception& error) {
    // Not the input's fault (a simulation process that died, a failed write): one line, status 1.
    stratsim::cli::print_error(error.what());
    return 1;
  }
  return 0;
}
