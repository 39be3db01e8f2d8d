#include "stratsim/core/json_reader.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "stratsim/core/errors.hpp"
#include "stratsim/core/limits.hpp"

namespace stratsim::core {
namespace {

// YAML scalars carry no type; resolve them the way YAML 1.2's core schema does so that a plan
// reads the same in YAML as in JSON.
nlohmann::json yaml_scalar(const YAML::Node& node) {
  const std::string& text = node.Scalar();
  if (node.Tag() == "!") return text;  // quoted: always a string
  if (text == "null" || text == "~" || text.empty()) return nullptr;
  if (text == "true" || text == "True") return true;
  if (text == "false" || text == "False") return false;
  // from_chars, not stoll/stod: those throw for every word, and a large YAML file (or one whose
  // aliases expand) is mostly words.
  const char* first = text.data() + (text.size() > 1 && text[0] == '+' ? 1 : 0);
  const char* last = text.data() + text.size();
  long long integer = 0;
  if (auto [end, error] = std::from_chars(first, last, integer); error == std::errc() && end == last) return integer;
  double number = 0;
  if (auto [end, error] = std::from_chars(first, last, number); error == std::errc() && end == last) return number;
  return text;
}

// JSON text is UTF-8 by definition and nlohmann's parser checks it; yaml-cpp passes any byte
// through. A string that is not UTF-8 would then fail much later, wherever it is written out (a
// report, an error message). Checked here, with nlohmann's own validation (its serializer).
void require_utf8(const std::string& text, const YAML::Mark& mark, const std::string& origin) {
  for (const char c : text)
    if (static_cast<unsigned char>(c) >= 0x80) {
      try {
        (void)nlohmann::json(text).dump();
      } catch (const nlohmann::json::type_error&) {
        throw InputError(fmt::format("{}: line {}, column {}: invalid UTF-8 (YAML text must be UTF-8)", origin,
                                     mark.line + 1, mark.column + 1));
      }
      return;
    }
}

// YAML's aliases make a tree of a graph: `a: &a [*a]` is infinitely deep, and nine aliases of
// nine make a billion values ("billion laughs"). Both are refused as they expand.
class YamlToJson {
 public:
  explicit YamlToJson(const std::string& origin) : origin_(origin) {}

  nlohmann::json convert(const YAML::Node& node, int depth = 0) {
    if (depth > kMaxDocumentDepth)
      throw InputError(
          fmt::format("{}: nested more than {} levels deep (a self-referencing alias?)", origin_, kMaxDocumentDepth));
    if (++values_ > kMaxDocumentValues)
      throw InputError(fmt::format("{}: expands to more than 2^22 values (aliases repeated inside aliases?)", origin_));
    switch (node.Type()) {
      case YAML::NodeType::Null:
      case YAML::NodeType::Undefined:
        return nullptr;
      case YAML::NodeType::Scalar:
        require_utf8(node.Scalar(), node.Mark(), origin_);
        return yaml_scalar(node);
      case YAML::NodeType::Sequence: {
        nlohmann::json array = nlohmann::json::array();
        for (const auto& item : node) array.push_back(convert(item, depth + 1));
        return array;
      }
      case YAML::NodeType::Map: {
        nlohmann::json object = nlohmann::json::object();
        for (const auto& item : node) {
          const std::string key = item.first.IsScalar() ? item.first.Scalar() : item.first.as<std::string>();
          require_utf8(key, item.first.Mark(), origin_);
          object[key] = convert(item.second, depth + 1);
        }
        return object;
      }
    }
    return nullptr;
  }

 private:
  const std::string& origin_;
  std::int64_t values_ = 0;
};

// nlohmann reports a byte offset; users want a line and column.
std::string line_column(const std::string& text, std::size_t offset) {
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return fmt::format("line {}, column {}", line, column);
}

bool looks_like_yaml(const std::string& path) { return path.ends_with(".yaml") || path.ends_with(".yml"); }

// The value in an error message, cut short: a wrong value may be a whole array of a large file.
std::string type_name(const nlohmann::json& value) {
  constexpr std::size_t kShown = 60;
  const auto shorten = [](std::string text) { return text.size() > kShown ? text.substr(0, kShown) + "..." : text; };
  if (value.is_string()) return fmt::format("the string \"{}\"", shorten(value.get<std::string>()));
  if (value.is_null()) return "null";
  return std::string(value.type_name()) + " " +
         shorten(value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace

void check_document_limits(const std::string& text, const std::string& origin) {
  if (static_cast<std::int64_t>(text.size()) > kMaxDocumentBytes)
    throw InputError(fmt::format("{}: larger than 1 GiB (stratsim's limit per document)", origin));
  // Brackets outside strings: both parsers recurse (or free recursively) per level of nesting.
  int depth = 0;
  bool in_string = false;
  char quote = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == quote) in_string = false;
    } else if (c == '"' || c == '\'') {
      in_string = true;
      quote = c;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxDocumentDepth)
        throw InputError(
            fmt::format("{}: {}: nested more than {} levels deep", origin, line_column(text, i), kMaxDocumentDepth));
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

nlohmann::json parse_document(const std::string& text, const std::string& origin, bool yaml) {
  check_document_limits(text, origin);
  if (yaml) {
    try {
      return YamlToJson(origin).convert(YAML::Load(text));
    } catch (const YAML::Exception& error) {
      throw InputError(fmt::format("{}: line {}, column {}: invalid YAML: {}", origin, error.mark.line + 1,
                                   error.mark.column + 1, error.msg));
    }
  }
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& error) {
    std::string message = error.what();
    // Drop nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 2: " prefix.
    if (auto colon = message.find(": ", message.find("parse error")); colon != std::string::npos)
      message = message.substr(colon + 2);
    throw InputError(
        fmt::format("{}: {}: invalid JSON: {}", origin, line_column(text, error.byte - (error.byte > 0)), message));
  } catch (const nlohmann::json::exception& error) {
    // A number too large for a double: nlohmann says which, but not where.
    std::string message = error.what();
    if (auto bracket = message.find("] "); bracket != std::string::npos) message = message.substr(bracket + 2);
    throw InputError(fmt::format("{}: invalid JSON: {}", origin, message));
  }
}

std::string read_text_file(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) throw InputError(fmt::format("{}: cannot open file ({})", path, std::strerror(errno)));
  // A regular file says its size: one past the limit is refused before a byte is read.
  struct stat status {};
  if (::fstat(::fileno(file.get()), &status) == 0 && S_ISREG(status.st_mode) && status.st_size > kMaxDocumentBytes)
    throw InputError(fmt::format("{}: larger than 1 GiB (stratsim's limit per document)", path));
  std::string text;
  char buffer[1 << 16];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, file.get())) > 0;) {
    text.append(buffer, n);
    // A device or a file that never ends (/dev/zero) stops here, not at the memory's end.
    if (static_cast<std::int64_t>(text.size()) > kMaxDocumentBytes)
      throw InputError(fmt::format("{}: larger than 1 GiB (stratsim's limit per document)", path));
  }
  if (std::ferror(file.get())) throw InputError(fmt::format("{}: cannot read file ({})", path, std::strerror(errno)));
  return text;
}

nlohmann::json load_document(const std::string& path) {
  const std::string text = read_text_file(path);
  bool yaml = looks_like_yaml(path);
  // A .yaml file that is really JSON parses either way; JSON is a subset of YAML 1.2.
  return parse_document(text, path, yaml);
}

JsonReader::JsonReader(const nlohmann::json& value, std::string file, std::string path)
    : value_(&value), file_(std::move(file)), path_(std::move(path)) {}

std::string JsonReader::where() const { return path_.empty() ? file_ : fmt::format("{}: {}", file_, path_); }

void JsonReader::fail(const std::string& message) const { throw InputError(fmt::format("{}: {}", where(), message)); }

bool JsonReader::has(const std::string& key) const { return value_->is_object() && value_->contains(key); }

JsonReader JsonReader::at(const std::string& key) const {
  expect_object();
  auto it = value_->find(key);
  std::string child = path_.empty() ? key : path_ + "." + key;
  if (it == value_->end()) throw InputError(fmt::format("{}: {}: required field is missing", file_, child));
  return JsonReader(*it, file_, child);
}

JsonReader JsonReader::at(std::size_t index) const {
  expect_array();
  return JsonReader(value_->at(index), file_, fmt::format("{}[{}]", path_, index));
}

std::size_t JsonReader::size() const { return value_->size(); }

void JsonReader::expect_object() const {
  if (!value_->is_object()) fail("expected an object, got " + type_name(*value_));
}
void JsonReader::expect_array() const {
  if (!value_->is_array()) fail("expected a list, got " + type_name(*value_));
}

void JsonReader::allow_only(std::initializer_list<const char*> allowed) const {
  const std::vector<std::string_view> names(allowed.begin(), allowed.end());
  allow_only(std::span<const std::string_view>(names));
}

void JsonReader::allow_only(std::span<const std::string_view> allowed) const {
  expect_object();
  for (const auto& item : value_->items()) {
    bool known = false;
    for (std::string_view name : allowed) known = known || item.key() == name;
    if (!known) {
      std::string names;
      for (std::string_view name : allowed) names += (names.empty() ? "" : ", ") + std::string(name);
      std::string child = path_.empty() ? item.key() : path_ + "." + item.key();
      throw InputError(fmt::format("{}: {}: unknown field (expected one of: {})", file_, child, names));
    }
  }
}

std::vector<std::string> JsonReader::keys() const {
  expect_object();
  std::vector<std::string> out;
  for (const auto& item : value_->items()) out.push_back(item.key());
  return out;
}

std::string JsonReader::as_string() const {
  if (!value_->is_string()) fail("expected a string, got " + type_name(*value_));
  return value_->get<std::string>();
}
double JsonReader::as_number() const {
  if (!value_->is_number()) fail("expected a number, got " + type_name(*value_));
  return value_->get<double>();
}
std::int64_t JsonReader::as_int() const {
  // 2^63 as a double: every whole double in [-2^63, 2^63) converts exactly; outside it the cast
  // is undefined (1e21 or 2^64 must be refused, not wrapped).
  constexpr double kTwo63 = 9223372036854775808.0;
  if (value_->is_number_unsigned()) {
    const auto number = value_->get<std::uint64_t>();
    if (number <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      return static_cast<std::int64_t>(number);
  } else if (value_->is_number_integer()) {
    return value_->get<std::int64_t>();
  } else if (value_->is_number_float()) {
    const double number = value_->get<double>();
    if (number >= -kTwo63 && number < kTwo63 && number == std::trunc(number)) return static_cast<std::int64_t>(number);
  }
  fail("expected an integer (64-bit), got " + type_name(*value_));
}
bool JsonReader::as_bool() const {
  if (!value_->is_boolean()) fail("expected true or false, got " + type_name(*value_));
  return value_->get<bool>();
}

std::string JsonReader::get_string(const std::string& key, const std::string& fallback) const {
  return has(key) && !at(key).is_null() ? at(key).as_string() : fallback;
}
double JsonReader::get_number(const std::string& key, double fallback) const {
  return has(key) && !at(key).is_null() ? at(key).as_number() : fallback;
}
std::int64_t JsonReader::get_int(const std::string& key, std::int64_t fallback) const {
  return has(key) && !at(key).is_null() ? at(key).as_int() : fallback;
}
bool JsonReader::get_bool(const std::string& key, bool fallback) const {
  return has(key) && !at(key).is_null() ? at(key).as_bool() : fallback;
}
std::vector<std::string> JsonReader::get_string_list(const std::string& key) const {
  std::vector<std::string> out;
  if (!has(key) || at(key).is_null()) return out;
  JsonReader node = at(key);
  if (node.is_string()) return {node.as_string()};
  node.expect_array();
  for (std::size_t i = 0; i < node.size(); ++i) out.push_back(node.at(i).as_string());
  return out;
}

}  // namespace stratsim::core
