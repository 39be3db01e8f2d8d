// The two kinds of failure the core reports. Both carry a complete, one-line message; the CLI
// prints it and exits with code 2.
#pragma once

#include <stdexcept>
#include <string>

namespace stratsim::core {

// A message quotes the input, and a JSON string may hold a NUL ("\u0000"): what() is a C string,
// so a NUL would cut the message short (to nothing, when it comes first). Written as \x00.
inline std::string without_nul(std::string message) {
  for (std::size_t at = message.find('\0'); at != std::string::npos; at = message.find('\0', at))
    message.replace(at, 1, "\\x00");
  return message;
}

// Malformed input: a file that does not parse, a field of the wrong type, an unknown name.
// The message starts with "FILE: FIELD: ".
class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& message) : std::runtime_error(without_nul(message)) {}
};

// A plan that PyTorch itself would reject. The message names the plan entry and, where PyTorch
// raises, repeats PyTorch's words so users can grep for them.
class PlanError : public std::runtime_error {
 public:
  explicit PlanError(const std::string& message) : std::runtime_error(without_nul(message)) {}
};

}  // namespace stratsim::core
