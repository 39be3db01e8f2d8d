// The two kinds of failure the core reports. Both carry a complete, one-line message; the CLI
// prints it and exits with code 2.
#pragma once

#include <stdexcept>
#include <string>

namespace stratsim::core {

// Malformed input: a file that does not parse, a field of the wrong type, an unknown name.
// The message starts with "FILE: FIELD: ".
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A plan that PyTorch itself would reject. The message names the plan entry and, where PyTorch
// raises, repeats PyTorch's words so users can grep for them.
class PlanError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace stratsim::core
