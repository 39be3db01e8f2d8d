// `stratsim compare`: hand-made reports with known figures give the documented errors; reports
// of different programs and files that are not reports fail with status 2 and say why.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "../cli_support.hpp"

namespace {

using json = nlohmann::json;
using stratsim::test::run_cli;

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("stratsim_compare_" + std::to_string(::getpid()) + "_" + name))
          .string();
  std::ofstream(path) << text;
  return path;
}

// A minimal report: two iterations, one collective op with two instances, two streams.
json report(double step1, double step2, double first, double second, double compute) {
  return {{"format", "stratsim.simulation"},
          {"version", 1},
          {"mode", "test"},
          {"platform", "test"},
          {"world_size", 4},
          {"iterations", {{{"step_time_s", step1}}, {{"step_time_s", step2}}}},
          {"collectives",
           {{{"op", 3},
             {"name", "ddp bucket 0"},
             {"kind", "all_reduce"},
             {"bytes", 1024},
             {"group_size", 2},
             {"duration_s", first}},
            {{"op", 3},
             {"name", "ddp bucket 0"},
             {"kind", "all_reduce"},
             {"bytes", 1024},
             {"group_size", 2},
             {"duration_s", second}}}},
          {"ranks", {{{"streams", {{"compute", compute}, {"comm", 1.0}}}}}}};
}

TEST(CompareCli, ErrorsAreRelativeToTheMeasuredRun) {
  const std::string predicted = write_temp("a.json", report(1.1, 0.9, 2.0, 4.0, 3.0).dump());
  const std::string measured = write_temp("b.json", report(1.0, 1.0, 2.0, 2.0, 4.0).dump());
  const auto r = run_cli("compare " + predicted + " " + measured + " --json", true);
  ASSERT_EQ(r.code, 0) << r.out;
  const json doc = json::parse(r.out);
  EXPECT_EQ(doc["format"], "stratsim.comparison");
  EXPECT_NEAR(doc["steps"][0]["error"].get<double>(), 0.1, 1e-12);
  EXPECT_NEAR(doc["steps"][1]["error"].get<double>(), -0.1, 1e-12);
  EXPECT_NEAR(doc["mean_abs_step_error"].get<double>(), 0.1, 1e-12);
  // The op's mean over its instances: predicted 3 s, measured 2 s.
  EXPECT_NEAR(doc["collectives"][0]["predicted_s"].get<double>(), 3.0, 1e-12);
  EXPECT_NEAR(doc["collectives"][0]["error"].get<double>(), 0.5, 1e-12);
  EXPECT_NEAR(doc["streams"][1]["error"].get<double>(), -0.25, 1e-12);  // "compute" sorts after "comm"

  const auto text = run_cli("compare " + predicted + " " + measured, true);
  ASSERT_EQ(text.code, 0);
  EXPECT_NE(text.out.find("+50.0%"), std::string::npos) << text.out;
  for (const auto& path : {predicted, measured}) std::filesystem::remove(path);
}

TEST(CompareCli, DifferentProgramsAndNonReportsFail) {
  const std::string a = write_temp("c.json", report(1, 1, 1, 1, 1).dump());
  json other = report(1, 1, 1, 1, 1);
  other["iterations"].push_back({{"step_time_s", 1.0}});
  const std::string b = write_temp("d.json", other.dump());
  auto r = run_cli("compare " + a + " " + b);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("same program"), std::string::npos) << r.out;

  const std::string not_report = write_temp("e.json", R"({"format": "something else"})");
  r = run_cli("compare " + a + " " + not_report);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find(not_report + ": format: expected stratsim.timeline, stratsim.simulation or stratsim.program"),
            std::string::npos)
      << r.out;
  r = run_cli("compare " + a + " /nonexistent/report.json");
  EXPECT_EQ(r.code, 2) << r.out;
  for (const auto& path : {a, b, not_report}) std::filesystem::remove(path);
}

// Wrong JSON types where the report's fields are, and a directory: one line naming the file and
// the field, exit 2 (they once ended in json's type_error or a stream error, exit 1).
TEST(CompareCli, WrongTypesAndDirectoriesAreOneLine) {
  const std::string good = write_temp("good.json", report(1, 1, 1, 1, 1).dump());
  std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"format": 1})", "format: expected a string"},
      {R"({"format": "stratsim.simulation", "version": "1"})", "expected a stratsim report"},
  };
  json kind = report(1, 1, 1, 1, 1);
  kind["collectives"][0]["kind"] = 7;
  cases.emplace_back(kind.dump(), "collectives[0].kind: expected a string");
  json time = report(1, 1, 1, 1, 1);
  time["iterations"][0]["step_time_s"] = "1 s";
  cases.emplace_back(time.dump(), "iterations[0].step_time_s: expected a number");
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const std::string path = write_temp("bad" + std::to_string(i) + ".json", cases[i].first);
    const auto r = run_cli("compare " + good + " " + path);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    EXPECT_NE(r.out.find(path + ": " + cases[i].second), std::string::npos) << r.out;
    std::filesystem::remove(path);
  }
  // a folder is read as per-rank profiler traces
  const std::string folder = write_temp("empty_folder", "");
  std::filesystem::remove(folder);
  std::filesystem::create_directory(folder);
  const auto r = run_cli("compare " + good + " " + folder);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find(folder + ": no .json or .json.gz profiler traces in this folder"), std::string::npos) << r.out;
  std::filesystem::remove(folder);
  std::filesystem::remove(good);
}

}  // namespace
