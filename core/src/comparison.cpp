// The computation behind `stratsim compare` (see comparison.hpp): reports are matched by op id
// (the same program gives the same ids) and checked by name.
#include "stratsim/core/comparison.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "stratsim/core/errors.hpp"
#include "stratsim/core/json_reader.hpp"
#include "stratsim/core/run_analysis.hpp"

namespace stratsim::core {
namespace {

using json = nlohmann::json;

double number(const json& object, const char* key, const std::string& where) {
  if (!object.contains(key) || !object[key].is_number())
    throw InputError(fmt::format("{}: field \"{}\": expected a number", where, key));
  return object[key].get<double>();
}

std::vector<ComparisonRow> step_rows(const RunReport& a, const RunReport& b) {
  const json &ia = a.document["iterations"], &ib = b.document["iterations"];
  if (ia.size() != ib.size())
    throw InputError(fmt::format("{} has {} iterations but {} has {}: compare runs of the same program", a.file,
                                 ia.size(), b.file, ib.size()));
  std::vector<ComparisonRow> rows;
  for (std::size_t i = 0; i < ia.size(); ++i)
    rows.push_back(
        {std::to_string(i + 1), "", number(ia[i], "step_time_s", a.file), number(ib[i], "step_time_s", b.file)});
  return rows;
}

// Per collective op: the mean duration over its group instances.
std::vector<ComparisonRow> collective_rows(const RunReport& a, const RunReport& b) {
  struct Sum {
    std::string name, detail;
    double total = 0;
    int count = 0;
  };
  const auto collect = [](const RunReport& report) {
    std::map<int, Sum> ops;
    for (const json& c : report.document["collectives"]) {
      Sum& sum = ops[static_cast<int>(number(c, "op", report.file))];
      sum.name = c.value("name", "");
      sum.detail = fmt::format("{} {} B x{}", c.value("kind", ""), number(c, "bytes", report.file),
                               static_cast<int>(number(c, "group_size", report.file)));
      sum.total += number(c, "duration_s", report.file);
      ++sum.count;
    }
    return ops;
  };
  const auto predicted = collect(a), measured = collect(b);
  std::vector<ComparisonRow> rows;
  for (const auto& [op, p] : predicted) {
    const auto it = measured.find(op);
    if (it == measured.end() || it->second.name != p.name)
      throw InputError(fmt::format("collective op {} (\"{}\") of {} is not in {}: compare runs of the same program", op,
                                   p.name, a.file, b.file));
    rows.push_back({p.name, p.detail, p.total / p.count, it->second.total / it->second.count});
  }
  if (rows.size() != measured.size())
    throw InputError(fmt::format("{} has collectives that {} lacks: compare runs of the same program", b.file, a.file));
  return rows;
}

// Busy time per stream on the first rank entry (a simulation's representative rank stands for all).
std::vector<ComparisonRow> stream_rows(const RunReport& a, const RunReport& b) {
  std::vector<ComparisonRow> rows;
  if (a.document["ranks"].empty() || b.document["ranks"].empty()) return rows;
  const json& sa = a.document["ranks"][0].value("streams", json::object());
  const json& sb = b.document["ranks"][0].value("streams", json::object());
  for (const auto& [stream, busy] : sa.items())
    if (sb.contains(stream)) rows.push_back({stream, "", busy.get<double>(), sb[stream].get<double>()});
  return rows;
}

void table(std::ostringstream& out, const std::string& title, const std::string& label,
           const std::vector<ComparisonRow>& rows) {
  out << "\n" << title << ":\n";
  out << fmt::format("  {:<36}  {:>14}  {:>14}  {:>8}\n", label, "predicted", "measured", "error");
  for (const ComparisonRow& row : rows)
    out << fmt::format("  {:<36}  {:>14}  {:>14}  {:>8}{}\n", row.label.substr(0, 36), format_seconds(row.predicted),
                       format_seconds(row.measured), format_error(row.error()),
                       row.detail.empty() ? "" : "  " + row.detail);
}

json rows_json(const std::vector<ComparisonRow>& rows, const char* label) {
  json array = json::array();
  for (const ComparisonRow& row : rows)
    array.push_back({{label, row.label},
                     {"predicted_s", row.predicted},
                     {"measured_s", row.measured},
                     {"error", error_json(row.error())}});
  return array;
}

// A report's fields, each of the type the writer gives it, so a damaged report fails here with its
// field path rather than deep inside a reader (compare, the viewer's summary). Required: what
// compare needs; optional: the rest of what the writer writes, checked when present (hand-made
// reports may carry less).
struct FieldTypes {
  std::initializer_list<const char*> numbers, strings, optional_numbers, optional_strings;
};

void check_fields(const JsonReader& object, const FieldTypes& types) {
  object.expect_object();
  for (const char* key : types.numbers) object.at(key).as_number();
  for (const char* key : types.strings) object.at(key).as_string();
  for (const char* key : types.optional_numbers)
    if (object.has(key)) object.at(key).as_number();
  for (const char* key : types.optional_strings)
    if (object.has(key)) object.at(key).as_string();
}

void check_rank_entry(const JsonReader& rank) {
  check_fields(
      rank, {{},
             {},
             {"compute_s", "communication_s", "exposed_communication_s", "overlap", "idle_s", "wait_at_collective_s"},
             {}});
  if (rank.has("ranks"))
    for (std::size_t k = 0; k < rank.at("ranks").size(); ++k) rank.at("ranks").at(k).as_int();
  if (rank.has("streams"))
    for (const std::string& stream : rank.at("streams").keys()) rank.at("streams").at(stream).as_number();
}

void check_report_fields(const JsonReader& doc) {
  check_fields(doc, {{"world_size"}, {}, {"makespan_s"}, {"mode", "platform"}});
  if (doc.at("world_size").as_int() < 1) doc.at("world_size").fail("expected at least 1 rank");
  const JsonReader iterations = doc.at("iterations"), ranks = doc.at("ranks"), collectives = doc.at("collectives");
  iterations.expect_array();
  for (std::size_t i = 0; i < iterations.size(); ++i)
    check_fields(iterations.at(i),
                 {{"step_time_s"},
                  {},
                  {"iteration", "start_s", "end_s", "samples_per_s", "tokens_per_s", "model_tflops_per_device",
                   "communication_s", "exposed_communication_s", "overlap"},
                  {}});
  ranks.expect_array();
  for (std::size_t i = 0; i < ranks.size(); ++i) check_rank_entry(ranks.at(i));
  collectives.expect_array();
  for (std::size_t i = 0; i < collectives.size(); ++i) {
    const JsonReader c = collectives.at(i);
    check_fields(c, {{"op", "bytes", "group_size", "duration_s"},
                     {},
                     {"instance", "start_s", "end_s", "algbw_GBps", "busbw_GBps"},
                     {"name", "kind", "group", "algorithm"}});
    c.at("op").as_int();
    if (c.at("group_size").as_int() < 1) c.at("group_size").fail("expected at least 1");
  }
  if (doc.has("links")) {
    const JsonReader links = doc.at("links");
    links.expect_array();
    for (std::size_t i = 0; i < links.size(); ++i)
      check_fields(links.at(i), {{}, {}, {"bandwidth_GBps", "bytes", "utilisation"}, {"name"}});
  }
}

ComparedRun described(const RunReport& report) {
  return {report.file, report.document.value("mode", ""), report.document.value("platform", "")};
}

}  // namespace

RunReport run_report_from_json(json doc, const std::string& origin) {
  // Looked up by type first: json::value() throws when a field has another type ({"format": 1}).
  const bool format =
      doc.is_object() && doc.contains("format") && doc["format"].is_string() && doc["format"] == "stratsim.simulation";
  if (!format || !doc.contains("version") || !doc["version"].is_number_integer() || doc["version"] != 1)
    throw InputError(
        fmt::format("{}: expected a stratsim report (\"format\": \"stratsim.simulation\", version 1) "
                    "from `stratsim simulate --json` or `stratsim run --json`",
                    origin));
  check_report_fields(JsonReader(doc, origin));
  return {origin, std::move(doc)};
}

RunReport load_run_report(const std::string& path) {
  // The shared reader: a directory, a device or a file past the size limit is one InputError.
  return run_report_from_json(parse_document(read_text_file(path), path, false), path);
}

std::string format_error(const std::optional<double>& error) {
  return error ? fmt::format("{:+.1f}%", 100 * *error) : std::string("-");
}

std::string format_error_magnitude(const std::optional<double>& error) {
  return error ? fmt::format("{:.1f}%", 100 * *error) : std::string("-");
}

json error_json(const std::optional<double>& error) { return error ? json(*error) : json(nullptr); }

std::optional<double> ComparisonRow::error() const {
  if (measured == 0) return std::nullopt;
  return (predicted - measured) / measured;
}

std::optional<double> mean_abs_error(const std::vector<ComparisonRow>& rows) {
  double total = 0;
  int count = 0;
  for (const ComparisonRow& row : rows)
    if (const auto error = row.error()) total += std::fabs(*error), ++count;
  if (count == 0) return std::nullopt;
  return total / count;
}

std::optional<double> Comparison::mean_abs_step_error() const { return mean_abs_error(steps); }
std::optional<double> Comparison::mean_abs_collective_error() const { return mean_abs_error(collectives); }

std::vector<ComparisonRow> largest_errors(std::vector<ComparisonRow> rows, int top) {
  std::stable_sort(rows.begin(), rows.end(), [](const ComparisonRow& x, const ComparisonRow& y) {
    return std::fabs(x.error().value_or(0)) > std::fabs(y.error().value_or(0));
  });
  if (static_cast<int>(rows.size()) > top) rows.resize(top);
  return rows;
}

Comparison compare_runs(const RunReport& a, const RunReport& b) {
  if (a.document.value("world_size", 0) != b.document.value("world_size", 0))
    throw InputError(fmt::format("{} ran {} ranks but {} ran {}: compare runs of the same program", a.file,
                                 a.document.value("world_size", 0), b.file, b.document.value("world_size", 0)));
  Comparison comparison;
  comparison.predicted = described(a);
  comparison.measured = described(b);
  comparison.steps = step_rows(a, b);
  comparison.collectives = collective_rows(a, b);
  comparison.streams = stream_rows(a, b);
  return comparison;
}

std::string comparison_text(const Comparison& c, int top) {
  std::ostringstream out;
  out << fmt::format("predicted: {} ({}; {})\n", c.predicted.file, c.predicted.mode, c.predicted.platform);
  out << fmt::format("measured:  {} ({}; {})\n", c.measured.file, c.measured.mode, c.measured.platform);
  out << fmt::format("mean |error|: steps {}, collective ops {} (error = (predicted - measured) / measured)\n",
                     format_error(c.mean_abs_step_error()), format_error(c.mean_abs_collective_error()));
  table(out, "steps", "iteration", c.steps);
  table(out,
        fmt::format("collective ops, mean duration per instance (largest |error| first, {} of {})",
                    std::min<std::size_t>(top, c.collectives.size()), c.collectives.size()),
        "op", largest_errors(c.collectives, top));
  table(out, "streams (busy time, first rank)", "stream", c.streams);
  return out.str();
}

json comparison_json(const Comparison& c) {
  const auto run = [](const ComparedRun& r) {
    return json{{"file", r.file}, {"mode", r.mode}, {"platform", r.platform}};
  };
  return {{"format", "stratsim.comparison"},
          {"version", 1},
          {"predicted", run(c.predicted)},
          {"measured", run(c.measured)},
          {"steps", rows_json(c.steps, "iteration")},
          {"collectives", rows_json(c.collectives, "name")},
          {"streams", rows_json(c.streams, "stream")},
          {"mean_abs_step_error", error_json(c.mean_abs_step_error())},
          {"mean_abs_collective_error", error_json(c.mean_abs_collective_error())}};
}

}  // namespace stratsim::core
