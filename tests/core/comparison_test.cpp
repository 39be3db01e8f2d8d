// core::compare_runs on reports built in memory: errors computed by hand, mismatched programs
// refused with the file names, and the JSON the viewer and scripts read.
#include <gtest/gtest.h>

#include "stratsim/core/comparison.hpp"
#include "stratsim/core/errors.hpp"

using namespace stratsim::core;
using nlohmann::json;

namespace {

json report(std::vector<double> steps, std::vector<std::pair<int, double>> collectives, double compute_busy) {
  json doc = {{"format", "stratsim.simulation"}, {"version", 1}, {"world_size", 2}, {"mode", "m"}, {"platform", "p"}};
  doc["iterations"] = json::array();
  for (double s : steps) doc["iterations"].push_back({{"step_time_s", s}});
  doc["collectives"] = json::array();
  for (auto [op, duration] : collectives)
    doc["collectives"].push_back({{"op", op},
                                  {"name", "all_reduce ddp bucket " + std::to_string(op)},
                                  {"kind", "all_reduce"},
                                  {"bytes", 1024},
                                  {"group_size", 2},
                                  {"duration_s", duration}});
  doc["ranks"] = json::array({{{"streams", {{"compute", compute_busy}}}}});
  return doc;
}

}  // namespace

TEST(Comparison, ErrorsAreRelativeToTheMeasuredRun) {
  // Op 7 has two instances in the prediction (0.1 s and 0.3 s: mean 0.2 s) against 0.25 s: -20%.
  const RunReport predicted = run_report_from_json(report({0.15, 0.10}, {{7, 0.1}, {7, 0.3}}, 0.08), "sim.json");
  const RunReport measured = run_report_from_json(report({0.10, 0.10}, {{7, 0.25}}, 0.10), "real.json");
  const Comparison c = compare_runs(predicted, measured);
  ASSERT_EQ(c.steps.size(), 2u);
  EXPECT_DOUBLE_EQ(*c.steps[0].error(), 0.5);
  EXPECT_DOUBLE_EQ(*c.steps[1].error(), 0.0);
  EXPECT_DOUBLE_EQ(*c.mean_abs_step_error(), 0.25);
  ASSERT_EQ(c.collectives.size(), 1u);
  EXPECT_DOUBLE_EQ(c.collectives[0].predicted, 0.2);
  EXPECT_DOUBLE_EQ(*c.collectives[0].error(), -0.2);
  EXPECT_EQ(c.collectives[0].detail, "all_reduce 1024 B x2");
  ASSERT_EQ(c.streams.size(), 1u);
  EXPECT_DOUBLE_EQ(*c.streams[0].error(), -0.2);
  const json doc = comparison_json(c);
  EXPECT_EQ(doc["format"], "stratsim.comparison");
  EXPECT_EQ(doc["predicted"]["file"], "sim.json");
  EXPECT_DOUBLE_EQ(doc["mean_abs_collective_error"].get<double>(), 0.2);
  EXPECT_NE(comparison_text(c, 15).find("+50.0%"), std::string::npos);
}

TEST(Comparison, AZeroMeasurementHasNoError) {
  const Comparison c = compare_runs(run_report_from_json(report({0.1}, {}, 0.1), "a"),
                                    run_report_from_json(report({0.0}, {}, 0.1), "b"));
  EXPECT_FALSE(c.steps[0].error().has_value());
  EXPECT_FALSE(c.mean_abs_step_error().has_value());
  EXPECT_TRUE(comparison_json(c)["mean_abs_step_error"].is_null());
}

TEST(Comparison, RunsOfDifferentProgramsAreRefusedByName) {
  const RunReport a = run_report_from_json(report({0.1}, {{3, 0.1}}, 0.1), "a.json");
  const RunReport b = run_report_from_json(report({0.1}, {{4, 0.1}}, 0.1), "b.json");
  try {
    compare_runs(a, b);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "collective op 3 (\"all_reduce ddp bucket 3\") of a.json is not in b.json: compare runs of the same "
                 "program");
  }
  EXPECT_THROW(compare_runs(a, run_report_from_json(report({0.1, 0.1}, {{3, 0.1}}, 0.1), "c.json")), InputError);
  EXPECT_THROW(run_report_from_json(json{{"format", "stratsim.program"}}, "x.json"), InputError);
}

TEST(Comparison, LargestErrorsComeFirst) {
  std::vector<ComparisonRow> rows{{"a", "", 1.1, 1.0}, {"b", "", 3.0, 1.0}, {"c", "", 0.5, 1.0}};
  const auto top = largest_errors(rows, 2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].label, "b");
  EXPECT_EQ(top[1].label, "c");
}
