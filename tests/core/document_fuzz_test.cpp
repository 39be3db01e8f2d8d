// The document loader against hostile input: every file in tests/data/documents/ (timelines v1
// and v2, a run report, a program, made by the real binary) mutated thousands of ways, structurally
// (a field deleted, retyped, made negative, huge or fractional; an array emptied, shortened or
// duplicated) and as text (truncated, a byte changed). Reading must either succeed or throw
// InputError; what reads must then analyse, report and write back without a crash (the ASan build
// turns an out-of-range index into a failure). Seeded, so a failure reproduces.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "../fuzz/document_use.hpp"
#include "stratsim/core/document.hpp"
#include "stratsim/core/errors.hpp"
#include "stratsim/core/json_reader.hpp"

namespace stratsim::core {
namespace {

using json = nlohmann::json;

constexpr int kStructuralMutationsPerFile = 600;
constexpr int kTextMutationsPerFile = 150;

std::vector<std::filesystem::path> corpus() {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(STRATSIM_TEST_DATA "/documents"))
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Every value in the document, as JSON pointers, so a mutation can pick one uniformly.
void collect_pointers(const json& value, const json::json_pointer& at, std::vector<json::json_pointer>& out) {
  out.push_back(at);
  if (value.is_object())
    for (const auto& [key, child] : value.items()) collect_pointers(child, at / key, out);
  else if (value.is_array())
    for (std::size_t i = 0; i < value.size(); ++i) collect_pointers(value[i], at / i, out);
}

// Values that break the assumptions readers make: wrong types, signs, sizes, fractions.
json hostile_value(std::mt19937& rng, const json& original) {
  static const std::vector<json> values = {json(),
                                           json(true),
                                           json(-1),
                                           json(0),
                                           json(1),
                                           json(7),
                                           json(1e308),
                                           json(-1e308),
                                           json(0.5),
                                           json(2147483648LL),
                                           json(-2147483649LL),
                                           json("forward"),
                                           json("all_reduce"),
                                           json(""),
                                           json("x"),
                                           json::array(),
                                           json::object(),
                                           json::array({-1}),
                                           json::array({0, 0}),
                                           json::array({1e300, -1e300})};
  std::uniform_int_distribution<std::size_t> pick(0, values.size() + 1);
  const std::size_t choice = pick(rng);
  if (choice == values.size() && original.is_number()) return original.get<double>() * -3.0;
  if (choice == values.size() + 1 && original.is_number_integer()) return original.get<std::int64_t>() + 1;
  return values[std::min(choice, values.size() - 1)];
}

json mutate(json doc, std::mt19937& rng) {
  std::vector<json::json_pointer> pointers;
  collect_pointers(doc, json::json_pointer(), pointers);
  const json::json_pointer target = pointers[std::uniform_int_distribution<std::size_t>(1, pointers.size() - 1)(rng)];
  json& value = doc[target];
  switch (std::uniform_int_distribution<int>(0, 4)(rng)) {
    case 0:  // delete it
      doc[target.parent_pointer()].is_object() ? void(doc[target.parent_pointer()].erase(target.back()))
                                               : void(doc[target.parent_pointer()].erase(std::stoul(target.back())));
      break;
    case 1:  // shorten an array, or retype a scalar
      if (value.is_array() && !value.empty()) value.erase(value.size() - 1);
      else value = hostile_value(rng, value);
      break;
    case 2:  // duplicate an array's element
      if (value.is_array() && !value.empty()) value.push_back(value.front());
      else value = hostile_value(rng, value);
      break;
    default:
      value = hostile_value(rng, value);
  }
  return doc;
}

// Reading either succeeds or says what is wrong; what reads is used the way the viewer uses it
// (shared with the libFuzzer target, tests/fuzz/document_fuzzer.cpp).
using fuzz::read_and_use;

TEST(DocumentFuzz, CorpusFilesReadCleanly) {
  const auto files = corpus();
  ASSERT_GE(files.size(), 5u);
  for (const auto& path : files) {
    SCOPED_TRACE(path.string());
    EXPECT_NO_THROW(read_and_use(json::parse(read_text(path)), path.string()));
    EXPECT_NO_THROW(document_from_json(json::parse(read_text(path)), path.string()));
  }
}

TEST(DocumentFuzz, StructuralMutationsReadOrFailCleanly) {
  for (const auto& path : corpus()) {
    const json original = json::parse(read_text(path));
    std::mt19937 rng(20261123);
    int rejected = 0;
    for (int i = 0; i < kStructuralMutationsPerFile; ++i) {
      const json doc = mutate(mutate(original, rng), rng);
      try {
        document_from_json(doc, "fuzz.json");
      } catch (const InputError&) {
        ++rejected;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "mutation " << i << " of " << path.filename() << " threw " << e.what();
        continue;
      }
      try {
        read_and_use(doc, "fuzz.json");
      } catch (const std::exception& e) {
        ADD_FAILURE() << "mutation " << i << " of " << path.filename() << ": reading succeeded, using threw "
                      << e.what();
      }
    }
    // The mutations must reach the checks, not bounce off the format field every time.
    EXPECT_GT(rejected, kStructuralMutationsPerFile / 10) << path.filename();
    EXPECT_LT(rejected, kStructuralMutationsPerFile) << path.filename();
  }
}

TEST(DocumentFuzz, TextMutationsReadOrFailCleanly) {
  const auto scratch = std::filesystem::temp_directory_path() / "stratsim-document-fuzz.json";
  for (const auto& path : corpus()) {
    const std::string original = read_text(path);
    std::mt19937 rng(1123);
    for (int i = 0; i < kTextMutationsPerFile; ++i) {
      std::string text = original;
      const std::size_t at = std::uniform_int_distribution<std::size_t>(0, text.size() - 1)(rng);
      if (i % 3 == 0) text.resize(at);
      else text[at] = "{}[],:\"0-.e\\x\n"[i % 14];
      std::ofstream(scratch, std::ios::binary) << text;
      try {
        const Document document = read_document(scratch.string());
        EXPECT_FALSE(document.origin.empty());
      } catch (const InputError& e) {
        EXPECT_EQ(std::string(e.what()).rfind(scratch.string() + ": ", 0), 0u) << e.what();
      } catch (const std::exception& e) {
        ADD_FAILURE() << "text mutation " << i << " of " << path.filename() << " threw " << e.what();
      }
    }
  }
  std::filesystem::remove(scratch);
}

}  // namespace
}  // namespace stratsim::core
