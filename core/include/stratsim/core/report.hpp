// Human-readable and JSON reports of a planning result.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "stratsim/core/planner.hpp"

namespace stratsim::core {

std::string text_report(const Model& model, const Plan& plan, const PlanResult& result);
nlohmann::json json_report(const Model& model, const Plan& plan, const PlanResult& result);
std::string format_bytes(std::int64_t bytes);  // "16.01 MB (16,008,000 B)"

}  // namespace stratsim::core
