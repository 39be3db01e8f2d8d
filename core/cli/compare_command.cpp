// stratsim compare A.json B.json: two JSON reports of the same program (a simulation and a
// measured run, or two simulations) side by side, per step, per collective op and per stream,
// with B taken as the reference: error = (A - B) / B.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command.hpp"
#include "stratsim/core/errors.hpp"
#include "stratsim/core/run_analysis.hpp"

namespace stratsim::cli {
namespace {

using core::InputError;
using json = nlohmann::json;

struct CompareArgs {
  std::string predicted, measured;
  bool json = false;
  std::string output;
  int top = 15;
};

json load_report(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("{}: cannot read file", path));
  json doc;
  try {
    doc = json::parse(in);
  } catch (const json::parse_error& error) {
    throw InputError(fmt::format("{}: not JSON: {}", path, error.what()));
  }
  if (!doc.is_object() || doc.value("format", "") != "stratsim.simulation" || doc.value("version", 0) != 1)
    throw InputError(
        fmt::format("{}: expected a stratsim report (\"format\": \"stratsim.simulation\", version 1) "
                    "from `stratsim simulate --json` or `stratsim run --json`",
                    path));
  for (const char* key : {"iterations", "collectives", "ranks"})
    if (!doc.contains(key) || !doc[key].is_array())
      throw InputError(fmt::format("{}: field \"{}\": expected an array", path, key));
  return doc;
}

double number(const json& object, const char* key, const std::string& where) {
  if (!object.contains(key) || !object[key].is_number())
    throw InputError(fmt::format("{}: field \"{}\": expected a number", where, key));
  return object[key].get<double>();
}

std::optional<double> relative_error(double predicted, double measured) {
  if (measured == 0) return std::nullopt;
  return (predicted - measured) / measured;
}

std::string percent(const std::optional<double>& error) {
  return error ? fmt::format("{:+.1f}%", 100 * *error) : std::string("-");
}

json error_json(const std::optional<double>& error) { return error ? json(*error) : json(nullptr); }

struct Row {
  std::string label;   // "1" (iteration), "ddp.bucket0" (op), "compute" (stream)
  std::string detail;  // kind and bytes for collectives
  double predicted = 0, measured = 0;
  std::optional<double> error() const { return relative_error(predicted, measured); }
};

std::vector<Row> step_rows(const json& a, const json& b, const CompareArgs& args) {
  if (a["iterations"].size() != b["iterations"].size())
    throw InputError(fmt::format("{} has {} iterations but {} has {}: compare runs of the same program", args.predicted,
                                 a["iterations"].size(), args.measured, b["iterations"].size()));
  std::vector<Row> rows;
  for (std::size_t i = 0; i < a["iterations"].size(); ++i)
    rows.push_back({std::to_string(i + 1), "", number(a["iterations"][i], "step_time_s", args.predicted),
                    number(b["iterations"][i], "step_time_s", args.measured)});
  return rows;
}

// Per collective op: the mean duration over its group instances, matched by op id (the same
// program gives the same ids) and checked by name.
std::vector<Row> collective_rows(const json& a, const json& b, const CompareArgs& args) {
  struct Sum {
    std::string name, detail;
    double total = 0;
    int count = 0;
  };
  const auto collect = [](const json& doc, const std::string& where) {
    std::map<int, Sum> ops;
    for (const json& c : doc["collectives"]) {
      Sum& sum = ops[static_cast<int>(number(c, "op", where))];
      sum.name = c.value("name", "");
      sum.detail = fmt::format("{} {} B x{}", c.value("kind", ""), number(c, "bytes", where),
                               static_cast<int>(number(c, "group_size", where)));
      sum.total += number(c, "duration_s", where);
      ++sum.count;
    }
    return ops;
  };
  const auto predicted = collect(a, args.predicted), measured = collect(b, args.measured);
  std::vector<Row> rows;
  for (const auto& [op, p] : predicted) {
    const auto it = measured.find(op);
    if (it == measured.end() || it->second.name != p.name)
      throw InputError(fmt::format("collective op {} (\"{}\") of {} is not in {}: compare runs of the same program", op,
                                   p.name, args.predicted, args.measured));
    rows.push_back({p.name, p.detail, p.total / p.count, it->second.total / it->second.count});
  }
  if (rows.size() != measured.size())
    throw InputError(fmt::format("{} has collectives that {} lacks: compare runs of the same program", args.measured,
                                 args.predicted));
  return rows;
}

// Busy time per stream on the first rank entry (a simulation's representative rank stands for all).
std::vector<Row> stream_rows(const json& a, const json& b) {
  std::vector<Row> rows;
  if (a["ranks"].empty() || b["ranks"].empty()) return rows;
  const json& sa = a["ranks"][0].value("streams", json::object());
  const json& sb = b["ranks"][0].value("streams", json::object());
  for (const auto& [stream, busy] : sa.items())
    if (sb.contains(stream)) rows.push_back({stream, "", busy.get<double>(), sb[stream].get<double>()});
  return rows;
}

// The rows with the largest absolute error first, at most `top` of them.
std::vector<Row> worst(std::vector<Row> rows, int top) {
  std::stable_sort(rows.begin(), rows.end(), [](const Row& x, const Row& y) {
    return std::fabs(x.error().value_or(0)) > std::fabs(y.error().value_or(0));
  });
  if (static_cast<int>(rows.size()) > top) rows.resize(top);
  return rows;
}

void table(std::ostringstream& out, const std::string& title, const std::string& label, const std::vector<Row>& rows) {
  out << "\n" << title << ":\n";
  out << fmt::format("  {:<36}  {:>14}  {:>14}  {:>8}\n", label, "predicted", "measured", "error");
  for (const Row& row : rows)
    out << fmt::format("  {:<36}  {:>14}  {:>14}  {:>8}{}\n", row.label.substr(0, 36),
                       core::format_seconds(row.predicted), core::format_seconds(row.measured), percent(row.error()),
                       row.detail.empty() ? "" : "  " + row.detail);
}

json rows_json(const std::vector<Row>& rows, const char* label) {
  json array = json::array();
  for (const Row& row : rows)
    array.push_back({{label, row.label},
                     {"predicted_s", row.predicted},
                     {"measured_s", row.measured},
                     {"error", error_json(row.error())}});
  return array;
}

// Mean absolute error of the rows, the headline figure.
std::optional<double> mean_abs_error(const std::vector<Row>& rows) {
  double total = 0;
  int count = 0;
  for (const Row& row : rows)
    if (const auto error = row.error()) total += std::fabs(*error), ++count;
  if (count == 0) return std::nullopt;
  return total / count;
}

int run_compare(const CompareArgs& args) {
  const json a = load_report(args.predicted), b = load_report(args.measured);
  if (a.value("world_size", 0) != b.value("world_size", 0))
    throw InputError(fmt::format("{} ran {} ranks but {} ran {}: compare runs of the same program", args.predicted,
                                 a.value("world_size", 0), args.measured, b.value("world_size", 0)));
  const std::vector<Row> steps = step_rows(a, b, args), collectives = collective_rows(a, b, args),
                         streams = stream_rows(a, b);
  std::string report;
  if (args.json) {
    json doc = {
        {"format", "stratsim.comparison"},
        {"version", 1},
        {"predicted", {{"file", args.predicted}, {"mode", a.value("mode", "")}, {"platform", a.value("platform", "")}}},
        {"measured", {{"file", args.measured}, {"mode", b.value("mode", "")}, {"platform", b.value("platform", "")}}},
        {"steps", rows_json(steps, "iteration")},
        {"collectives", rows_json(collectives, "name")},
        {"streams", rows_json(streams, "stream")},
        {"mean_abs_step_error", error_json(mean_abs_error(steps))},
        {"mean_abs_collective_error", error_json(mean_abs_error(collectives))}};
    report = doc.dump(2) + "\n";
  } else {
    std::ostringstream out;
    out << fmt::format("predicted: {} ({}; {})\n", args.predicted, a.value("mode", ""), a.value("platform", ""));
    out << fmt::format("measured:  {} ({}; {})\n", args.measured, b.value("mode", ""), b.value("platform", ""));
    out << fmt::format("mean |error|: steps {}, collective ops {} (error = (predicted - measured) / measured)\n",
                       percent(mean_abs_error(steps)), percent(mean_abs_error(collectives)));
    table(out, "steps", "iteration", steps);
    table(out,
          fmt::format("collective ops, mean duration per instance (largest |error| first, {} of {})",
                      std::min<std::size_t>(args.top, collectives.size()), collectives.size()),
          "op", worst(collectives, args.top));
    table(out, "streams (busy time, first rank)", "stream", streams);
    report = out.str();
  }
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
