// What every fuzz target shares: the bytes as text, and the one rule a reader must keep on any
// input. A reader answers bad input with core::InputError (malformed) or core::PlanError (a plan
// PyTorch would refuse), each one line naming the input; anything else (another exception, a
// crash, a sanitizer report, a leak, more memory or time than libFuzzer allows) is a finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "stratsim/core/errors.hpp"
#include "stratsim/core/json_reader.hpp"
#include "stratsim/core/model_io.hpp"
#include "stratsim/core/plan.hpp"
#include "stratsim/core/planner.hpp"

namespace stratsim::fuzz {

inline std::string text_of(const std::uint8_t* data, std::size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// A property of accepted input that does not hold: a finding, as a crash would be.
class Broken : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

inline void require(bool holds, const std::string& what) {
  if (!holds) throw Broken(what);
}

// A reader's error names the input it came from ("fuzz.yaml: modules[0].bias: ..."); a later
// stage (planning, simulating) names the plan entry or platform instead, so it passes "".
inline void check_error(const std::exception& error, const std::string& origin) {
  const std::string message = error.what();
  require(!message.empty(), "an empty error message");
  require(origin.empty() || message.find(origin) != std::string::npos,
          "the error does not name " + origin + ": " + message);
}

// Runs `body`; the clean refusals return false, a success true, anything else escapes (libFuzzer
// reports an uncaught exception as a crash, with the input that caused it).
template <class Body>
bool accepted(const std::string& origin, Body&& body) {
  try {
    body();
    return true;
  } catch (const core::InputError& error) {
    check_error(error, origin);
  } catch (const core::PlanError& error) {
    check_error(error, "");  // PyTorch's words, naming the module or plan step
  }
  return false;
}

// What the platform targets simulate: DDP of a small MLP on 2 ranks, planned once.
inline const core::Program& small_ddp_program() {
  static const core::Program program =
      core::plan_training(core::load_model("zoo:SimpleMLP"), core::load_plan("builtin:ddp")).program;
  return program;
}

// What `parse` (core::parse_model, core::parse_plan, ...) reads from `text` as a JSON or YAML
// document, or nothing when the input is refused cleanly.
template <class Parse>
auto read_document_as(const std::string& text, const std::string& origin, bool yaml, Parse&& parse)
    -> std::optional<std::decay_t<decltype(parse(std::declval<const core::JsonReader&>()))>> {
  std::optional<std::decay_t<decltype(parse(std::declval<const core::JsonReader&>()))>> result;
  accepted(origin, [&] {
    const nlohmann::json document = core::parse_document(text, origin, yaml);
    result = parse(core::JsonReader(document, origin));
  });
  return result;
}

// Every document reader takes JSON and YAML (by the file's extension): each input is read as both,
// through `read(text, origin, yaml)`.
template <class Read>
void as_json_and_yaml(const std::uint8_t* data, std::size_t size, Read&& read) {
  const std::string text = text_of(data, size);
  read(text, "fuzz.json", false);
  read(text, "fuzz.yaml", true);
}

}  // namespace stratsim::fuzz
