// Human-readable and JSON reports of a planning result.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "stratsim/core/planner.hpp"

namespace stratsim::core {

std::string text_report(const Model& model, const Plan& plan, const PlanResult& result);
nlohmann::json json_report(const Model& model, const Plan& plan, const PlanResult& result);
std::string format_bytes(std::int64_t bytes);  // "16.01 MB (16,008,000 B)"
// The planned rank's allocation history (PlanResult::memory_events) in the allocator-history
// format `stratsim allocator` replays (caching_allocator.hpp): "trace" entries
// [action, tensor, bytes, stream, op], with the op's index where PyTorch's has a time, and
// "streams" naming the allocator pools.
nlohmann::json memory_history_document(const PlanResult& result);

}  // namespace stratsim::core
