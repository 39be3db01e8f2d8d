// The checked number fields of cost-model documents, shared by the compute part (device.cpp) and
// the rest (cost_model.cpp), so both say the same thing about the same kind of bad value.
#pragma once

#include <fmt/format.h>

#include "stratsim/core/json_reader.hpp"

namespace stratsim::sim::detail {

inline double read_fraction(const core::JsonReader& node) {
  const double value = node.as_number();
  if (!(value > 0 && value <= 1)) node.fail(fmt::format("expected a fraction in (0, 1], got {}", value));
  return value;
}

inline double read_microseconds(const core::JsonReader& node) {  // returns seconds
  const double us = node.as_number();
  if (!(us >= 0 && us <= 1e6)) node.fail(fmt::format("expected microseconds from 0 to 1e6, got {}", us));
  return us * 1e-6;
}

}  // namespace stratsim::sim::detail
