// The JSON Schemas under docs/formats/ against what the real binary writes (plan --emit-program,
// simulate --timeline and --json), validated with valijson; and each schema against broken
// documents (a wrong type, a missing field, an unknown phase), so a schema that accepts anything
// fails here.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validator.hpp>

#include "../cli_support.hpp"

namespace stratsim {
namespace {

using json = nlohmann::json;
using Adapter = valijson::adapters::NlohmannJsonAdapter;

const std::filesystem::path kFormats = std::filesystem::path(STRATSIM_SOURCE_DIR) / "docs" / "formats";

json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// valijson resolves "$ref": "program.schema.json" against the schema's $id; the file is beside it.
const json* fetch_schema(const std::string& uri) {
  const std::string name = uri.substr(uri.find_last_of('/') + 1);
  return new json(read_json(kFormats / name));
}
void free_schema(const json* document) { delete document; }

class Schema {
 public:
  explicit Schema(const std::string& name) : document_(read_json(kFormats / name)) {
    valijson::SchemaParser parser;
    parser.populateSchema(Adapter(document_), schema_, fetch_schema, free_schema);
  }
  // "" when valid, else the first errors with their paths.
  std::string errors(const json& document) const {
    valijson::Validator validator;
    valijson::ValidationResults results;
    if (validator.validate(schema_, Adapter(document), &results)) return "";
    std::string out;
    valijson::ValidationResults::Error error;
    for (int i = 0; i < 5 && results.popError(error); ++i) {
      std::string path;
      for (const std::string& part : error.context) path += part;
      out += path + ": " + error.description + "\n";
    }
    return out.empty() ? "invalid" : out;
  }

 private:
  json document_;
  valijson::Schema schema_;
};

class Outputs : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() / ("stratsim-schema-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    const std::string d = dir_.string();
    // Full mode on 2 nodes x 2 GPUs (DDP x TP): every rank recorded, ranks null for mesh groups.
    ASSERT_EQ(test::run_cli("simulate --plan builtin:ddp-tp --iterations 2 --platform h100:nodes=2,gpus=2 --ranks full "
                            "--timeline " +
                            d + "/full.json --json -o " + d + "/full.report.json --quiet")
                  .code,
              0);
    ASSERT_EQ(
        test::run_cli("simulate --plan builtin:fsdp --iterations 1 --timeline " + d + "/rep.json -o /dev/null --quiet")
            .code,
        0);
    const auto ok = [](const std::string& args) { return test::run_cli(args).code == 0; };
    ASSERT_TRUE(ok("plan --plan builtin:fsdp-tp --model zoo:TestModel --emit-program " + d +
                   "/program.json --json -o " + d + "/plan.json"));
    ASSERT_TRUE(ok("plan --plan builtin:ddp --json -o " + d + "/plan-ddp.json"));
    ASSERT_TRUE(
        ok("simulate --plan builtin:ddp-tp --iterations 2 --platform a100:nodes=2,gpus=2 --ranks full --json -o " + d +
           "/other.report.json --quiet"));
    ASSERT_TRUE(
        ok("compare " + d + "/full.report.json " + d + "/other.report.json --json -o " + d + "/comparison.json"));
    // collective by collective: a simulation against the real Gloo trace, and against another
    // model's simulation (unmatched collectives)
    ASSERT_TRUE(ok("simulate --model zoo:SimpleMLP --iterations 3 --platform cpu:procs=2 --timeline " + d +
                   "/mlp.json -o /dev/null --quiet"));
    ASSERT_TRUE(ok("compare " + d + "/mlp.json " + STRATSIM_TEST_DATA + "/kineto/ddp_simplemlp_gloo --json -o " + d +
                   "/op-comparison.json"));
    ASSERT_TRUE(ok("compare " + d + "/mlp.json " + d + "/rep.json --json -o " + d + "/op-comparison-unmatched.json"));
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }
  static json output(const char* name) { return read_json(dir_ / name); }
  static std::filesystem::path dir_;
};
std::filesystem::path Outputs::dir_;

TEST_F(Outputs, TimelinesMatchTheirSchema) {
  const Schema schema("timeline-v2.schema.json");
  EXPECT_EQ(schema.errors(output("full.json")), "");
  EXPECT_EQ(schema.errors(output("rep.json")), "");
}

TEST_F(Outputs, ProgramsMatchTheirSchema) {
  EXPECT_EQ(Schema("program.schema.json").errors(output("program.json")), "");
}

TEST_F(Outputs, ReportsMatchTheirSchema) {
  EXPECT_EQ(Schema("simulation.schema.json").errors(output("full.report.json")), "");
}

TEST_F(Outputs, PlanReportsAndComparisonsMatchTheirSchemas) {
  const Schema plan("plan-report.schema.json");
  EXPECT_EQ(plan.errors(output("plan.json")), "");
  EXPECT_EQ(plan.errors(output("plan-ddp.json")), "");
  EXPECT_EQ(Schema("comparison.schema.json").errors(output("comparison.json")), "");
  const Schema ops("op-comparison.schema.json");
  EXPECT_EQ(ops.errors(output("op-comparison.json")), "");
  const json unmatched = output("op-comparison-unmatched.json");
  EXPECT_FALSE(unmatched["unmatched"].empty());
  EXPECT_EQ(ops.errors(unmatched), "");
  json broken = output("op-comparison.json");
  broken["matched"][0]["kind"] = "barrier";
  EXPECT_NE(ops.errors(broken), "");
}

// Each schema refuses what the readers refuse: so the tests above cannot pass vacuously.
TEST_F(Outputs, SchemasRejectBrokenDocuments) {
  const Schema timeline("timeline-v2.schema.json"), program("program.schema.json"), report("simulation.schema.json");
  json doc = output("full.json");
  doc["run"]["timings"][0]["start_s"][0] = "soon";
  EXPECT_NE(timeline.errors(doc), "");
  doc = output("full.json");
  doc["run"].erase("collectives");
  EXPECT_NE(timeline.errors(doc), "");
  doc = output("full.json");
  doc["program"]["ops"][0]["phase"] = "sideways";
  EXPECT_NE(timeline.errors(doc), "") << "the program inside a timeline is checked too";
  doc = output("full.json");
  doc["run"]["wall_seconds"] = 1;
  EXPECT_NE(timeline.errors(doc), "");
  doc = output("full.json");
  doc["run"]["collectives"]["ranks"][0] = "all";
  EXPECT_NE(timeline.errors(doc), "");
  json p = output("program.json");
  p["ops"][0]["kind"] = "all_reduce";  // a compute op with a collective's field
  if (p["ops"][0]["type"] == "collective") p["ops"][0]["kind"] = "gossip";
  EXPECT_NE(program.errors(p), "");
  p = output("program.json");
  p["ops"][1].erase("deps");
  EXPECT_NE(program.errors(p), "");
  json r = output("full.report.json");
  r["collectives"][0]["busbw_GBps"] = -1;
  EXPECT_NE(report.errors(r), "");
  r = output("full.report.json");
  r["iterations"][0].erase("step_time_s");
  EXPECT_NE(report.errors(r), "");
  json plan = output("plan.json");
  plan["iterations"][0]["collectives"][0]["phase"] = "sideways";
  EXPECT_NE(Schema("plan-report.schema.json").errors(plan), "");
  json comparison = output("comparison.json");
  comparison["steps"][0]["predicted_s"] = "fast";
  EXPECT_NE(Schema("comparison.schema.json").errors(comparison), "");
}

}  // namespace
}  // namespace stratsim
