// limits.hpp against hostile input (issue 13's classes "Numbers" and "Depth and size"): each case
// used to crash (stack overflow, std::bad_alloc) or to overflow silently; each is now one
// InputError naming the file or field, raised before the work.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "planner_test_support.hpp"
#include "stratsim/core/errors.hpp"
#include "stratsim/core/json_reader.hpp"
#include "stratsim/core/limits.hpp"
#include "stratsim/core/model_io.hpp"

using namespace stratsim::core;
using namespace stratsim::test;

namespace {

// The InputError `body` throws ("" when it throws none).
std::string input_error(const std::function<void()>& body) {
  try {
    body();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string nested_model(int depth) {
  std::string module = R"({"name": "x", "type": "Linear", "in_features": 4, "out_features": 4})";
  for (int i = 0; i < depth; ++i)
    module = R"({"name": "c)" + std::to_string(i) + R"(", "type": "Sequential", "children": [)" + module + "]}";
  return R"({"name": "D", "modules": [)" + module + "]}";
}

}  // namespace

TEST(Limits, DeepNestingIsRefusedBeforeParsing) {
  const std::string arrays = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_TRUE(contains(input_error([&] { parse_document(arrays, "deep.json", false); }),
                       "deep.json: line 1, column 513: nested more than 512 levels deep"));
  EXPECT_TRUE(contains(input_error([&] { parse_document(arrays, "deep.yaml", true); }), "nested more than 512"));
  // A model nested 10,000 modules deep is 20,000 levels of JSON.
  EXPECT_TRUE(
      contains(input_error([&] { parse_document(nested_model(10000), "m.json", false); }), "nested more than 512"));
  // 100 modules deep is fine.
  EXPECT_NO_THROW(parse_model(JsonReader(parse_document(nested_model(100), "m.json", false), "m.json")));
  // Brackets inside strings do not count.
  EXPECT_NO_THROW(parse_document(R"({"name": ")" + std::string(1000, '[') + R"("})", "s.json", false));
}

TEST(Limits, YamlAliasesCannotLoopOrExplode) {
  EXPECT_TRUE(contains(input_error([] { parse_document("a: &a [*a]\n", "loop.yaml", true); }),
                       "loop.yaml: nested more than 512 levels deep (a self-referencing alias?)"));
  std::string laughs = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 10; ++i) {
    laughs += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 9; ++k) laughs += (k ? ", *a" : "*a") + std::to_string(i - 1);
    laughs += "]\n";
  }
  EXPECT_TRUE(contains(input_error([&] { parse_document(laughs, "laughs.yaml", true); }),
                       "laughs.yaml: expands to more than 2^22 values"));
}

TEST(Limits, SizesThatWouldOverflowAreRefused) {
  const auto model_error = [](const std::string& text) {
    return input_error([&] { parse_model(JsonReader(parse_document(text, "m.json", false), "m.json")); });
  };
  EXPECT_EQ(model_error(R"({"name": "M", "modules": [{"name": "x", "type": "Linear", "in_features": 4294967296,
                                                       "out_features": 4}]})"),
            "m.json: modules[0].in_features: expected a positive integer up to 2^31, got 4294967296");
  EXPECT_EQ(
      model_error(R"({"name": "M", "modules": [{"name": "x", "type": "Linear", "in_features": 4, "out_features": 4}],
                            "parameters": [{"name": "t", "shape": [4294967296, 2, 2]}]})"),
      "m.json: parameters[0].shape[0]: expected a positive extent up to 2^31");
  EXPECT_EQ(
      model_error(R"({"name": "M", "modules": [{"name": "x", "type": "Linear", "in_features": 4, "out_features": 4}],
                            "parameters": [{"name": "t", "shape": [2147483647, 2147483647]}]})"),
      "m.json: parameters[0]: parameter \"t\" would have more than 2^48 elements (stratsim's limit per tensor)");
  // zoo:Net's 4 layers of dim x dim: int64 bytes went negative.
  EXPECT_TRUE(contains(input_error([] { load_model("zoo:Net:dim=1000000000"); }), "more than 2^48 elements"));
  EXPECT_EQ(input_error([] { load_model("zoo:gpt:layers=100000"); }),
            "zoo:gpt:layers=100000: option layers: expected a positive integer up to 16384, got \"100000\"");
  EXPECT_EQ(input_error([] { plan_from_json(R"({"world_size": 2, "batch_size": 9223372036854775807})"); }),
            "plan.json: batch_size: expected a positive integer up to 2^31");
  // Accepted extents whose product is too large: one activation of the widest layer.
  EXPECT_EQ(input_error([] {
              run_plan("zoo:llama2-7b", R"({"world_size": 2, "batch_size": 100000000, "seq_len": 100000000})");
            }),
            "batch_size 100000000 x seq_len 100000000 x the model's widest layer (32000 features) is more than 2^48 "
            "elements per activation (stratsim's limit per tensor)");
}

// Integers past int64 (a float such as 1e21, or an unsigned 2^64) are refused, not cast: that
// cast is undefined behaviour (found by tests/fuzz/plan_fuzzer.cpp).
TEST(Limits, IntegersPastInt64AreRefused) {
  for (const std::string value : {"1e21", "-1e19", "18446744073709551615", "9223372036854775808"})
    EXPECT_TRUE(contains(input_error([&] { plan_from_json(R"({"world_size": )" + value + "}"); }),
                         "plan.json: world_size: expected an integer (64-bit), got number " + value.substr(0, 2)))
        << value;
  EXPECT_EQ(input_error([] { plan_from_json(R"({"world_size": 2, "batch_size": 9223372036854775807.0})"); }),
            "plan.json: batch_size: expected an integer (64-bit), got number 9.223372036854776e+18");
}

// A regular file past the limit is refused by its size, before it is read (a sparse file here:
// reading it would allocate the whole GiB).
TEST(Limits, AFileLargerThanTheLimitIsRefusedUnread) {
  const std::string path = testing::TempDir() + "/stratsim-huge-model.json";
  std::ofstream(path).close();
  std::filesystem::resize_file(path, static_cast<std::uintmax_t>(kMaxDocumentBytes) + 1);
  EXPECT_EQ(input_error([&] { load_model(path); }), path + ": larger than 1 GiB (stratsim's limit per document)");
  std::filesystem::remove(path);
}

TEST(Limits, CheckedProduct) {
  EXPECT_EQ(checked_product(std::int64_t{1} << 31, std::int64_t{1} << 31), std::int64_t{1} << 62);
  EXPECT_FALSE(checked_product(std::int64_t{1} << 32, std::int64_t{1} << 31).has_value());
}
