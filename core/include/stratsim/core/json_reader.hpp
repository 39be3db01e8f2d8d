// Strict, path-aware access to a parsed JSON/YAML document. Every accessor names the file and the
// field path in its error ("plan.yaml: steps[2].replicate.bucket_cap_mb: expected a number").
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace stratsim::core {

// Parses FILE as JSON or YAML (by extension; JSON is also accepted under .yaml) and converts YAML
// to the same JSON value, so one reader handles both. Throws InputError with line and column.
nlohmann::json load_document(const std::string& path);
// A whole file's bytes, refused past limits.hpp's document size; InputError naming the path.
std::string read_text_file(const std::string& path);
// Same for text already in memory; `origin` names it in errors.
nlohmann::json parse_document(const std::string& text, const std::string& origin, bool yaml);
// Refuses, in one InputError naming `origin` (and the line), a document past limits.hpp's size or
// nesting depth; parse_document checks it first.
void check_document_limits(const std::string& text, const std::string& origin);

class JsonReader {
 public:
  JsonReader(const nlohmann::json& value, std::string file, std::string path = "");

  const nlohmann::json& value() const { return *value_; }
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }

  bool has(const std::string& key) const;
  JsonReader at(const std::string& key) const;  // required member
  JsonReader at(std::size_t index) const;       // array element
  std::size_t size() const;                     // array or object size

  void expect_object() const;
  void expect_array() const;
  // Rejects members outside `allowed` so typos are caught, not silently ignored.
  void allow_only(std::initializer_list<const char*> allowed) const;
  void allow_only(std::span<const std::string_view> allowed) const;
  std::vector<std::string> keys() const;  // object keys, sorted (nlohmann::json does not keep document order)

  std::string as_string() const;
  double as_number() const;
  std::int64_t as_int() const;
  bool as_bool() const;
  bool is_null() const { return value_->is_null(); }
  bool is_string() const { return value_->is_string(); }
  bool is_array() const { return value_->is_array(); }
  bool is_object() const { return value_->is_object(); }
  bool is_number() const { return value_->is_number(); }

  std::string get_string(const std::string& key, const std::string& fallback) const;
  double get_number(const std::string& key, double fallback) const;
  std::int64_t get_int(const std::string& key, std::int64_t fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::vector<std::string> get_string_list(const std::string& key) const;  // string or list

  // Throws InputError("FILE: PATH: message").
  [[noreturn]] void fail(const std::string& message) const;
  std::string where() const;  // "FILE: PATH"

 private:
  const nlohmann::json* value_;
  std::string file_;
  std::string path_;
};

}  // namespace stratsim::core
