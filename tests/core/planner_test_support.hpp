// Helpers shared by the planner tests: plans and models from JSON text, and views of a
// PlanResult's collectives (per iteration, filtered by op/phase/reason), printable on failure.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "stratsim/core/bucketing.hpp"
#include "stratsim/core/errors.hpp"
#include "stratsim/core/json_reader.hpp"
#include "stratsim/core/model_io.hpp"
#include "stratsim/core/planner.hpp"

namespace stratsim::test {

// The message of the PlanError `body` throws, or "" when it does not throw.
inline std::string plan_error(const std::function<void()>& body) {
  try {
    body();
  } catch (const core::PlanError& e) {
    return e.what();
  }
  return "";
}

using core::CollectiveRecord;
using core::IterationRecord;
using core::Model;
using core::Phase;
using core::Plan;
using core::PlanResult;

inline Plan plan_from_json(const std::string& text, const std::string& origin = "plan.json") {
  nlohmann::json doc = core::parse_document(text, origin, false);
  return core::parse_plan(core::JsonReader(doc, origin));
}

inline Model model_from_json(const nlohmann::json& doc, const std::string& origin = "model.json") {
  return core::parse_model(core::JsonReader(doc, origin));
}

inline PlanResult run_plan(const Model& model, const std::string& plan_text, int rank = 0, int iterations = 0) {
  return core::plan_training(model, plan_from_json(plan_text), {rank, iterations});
}

inline PlanResult run_plan(const std::string& model_spec, const std::string& plan_text, int rank = 0,
                           int iterations = 0) {
  return run_plan(core::load_model(model_spec), plan_text, rank, iterations);
}

// Sequential(Linear(10,10), ReLU, Linear(10,10)): 220 float32 parameters.
inline Model seq_model() {
  return model_from_json({{"name", "Sequential"},
                          {"modules",
                           {{{"name", "0"}, {"type", "Linear"}, {"in_features", 10}, {"out_features", 10}},
                            {{"name", "1"}, {"type", "ReLU"}},
                            {{"name", "2"}, {"type", "Linear"}, {"in_features", 10}, {"out_features", 10}}}}});
}

// The size of a group as reports name it: "world", a mesh dim, or dims joined by '+'; "dp(4)"
// is dp cut into runs of 4 ranks.
inline int group_size_by_name(const Plan& plan, const std::string& name) {
  if (name == "world") return plan.world_size;
  if (const std::size_t open = name.find('('); open != std::string::npos) return std::stoi(name.substr(open + 1));
  int size = 1;
  std::size_t start = 0;
  while (true) {
    const std::size_t plus = name.find('+', start);
    const int dim = plan.mesh.dim_index(name.substr(start, plus - start));
    EXPECT_GE(dim, 0) << name;
    if (dim >= 0) size *= plan.mesh.dim_size(dim);
    if (plus == std::string::npos) break;
    start = plus + 1;
  }
  return size;
}

// 1-based, as the planner numbers iterations.
inline const IterationRecord& iteration(const PlanResult& result, int index) {
  if (index < 1 || index > static_cast<int>(result.iterations.size()))
    throw std::out_of_range("no iteration " + std::to_string(index));
  return result.iterations[static_cast<std::size_t>(index - 1)];
}

inline std::string describe(const CollectiveRecord& c) {
  std::ostringstream out;
  out << core::phase_name(c.phase) << ' ' << c.op << " [" << c.group << "] " << c.bytes << " B ("
      << core::dtype_name(c.dtype) << ") " << c.reason;
  return out.str();
}

inline std::string describe(const IterationRecord& it) {
  std::ostringstream out;
  out << "iteration " << it.index << (it.sync ? "" : " (no_sync)") << ":\n";
  for (const CollectiveRecord& c : it.collectives) out << "  " << describe(c) << '\n';
  return out.str();
}

inline std::string describe(const PlanResult& result) {
  std::string out;
  for (const IterationRecord& it : result.iterations) out += describe(it);
  return out;
}

// Collectives of one iteration matching every given condition ("" / nullopt-like defaults mean any).
struct Filter {
  std::string op;            // exact CommDebugMode key, "" = any
  int phase = -1;            // static_cast<int>(Phase), -1 = any
  std::string reason;        // substring of the reason, "" = any
  std::string group;         // exact group name, "" = any
  std::string module = "*";  // exact module FQN; "*" = any
};

inline std::vector<CollectiveRecord> select(const IterationRecord& it, const Filter& f) {
  std::vector<CollectiveRecord> out;
  for (const CollectiveRecord& c : it.collectives) {
    if (!f.op.empty() && c.op != f.op) continue;
    if (f.phase >= 0 && static_cast<int>(c.phase) != f.phase) continue;
    if (!f.reason.empty() && c.reason.find(f.reason) == std::string::npos) continue;
    if (!f.group.empty() && c.group != f.group) continue;
    if (f.module != "*" && c.module != f.module) continue;
    out.push_back(c);
  }
  return out;
}

inline Filter op(const std::string& key, int phase = -1, const std::string& reason = "") {
  Filter f;
  f.op = key;
  f.phase = phase;
  f.reason = reason;
  f.module = "*";
  return f;
}

inline int phase_of(Phase p) { return static_cast<int>(p); }

inline std::vector<std::int64_t> bytes_of(const std::vector<CollectiveRecord>& list) {
  std::vector<std::int64_t> out;
  for (const CollectiveRecord& c : list) out.push_back(c.bytes);
  return out;
}

inline std::map<std::string, int> counts_of(const IterationRecord& it) {
  std::map<std::string, int> out;
  for (const CollectiveRecord& c : it.collectives) ++out[c.op];
  return out;
}

// Counts of one iteration without the one-off DDP construction collectives (phase init).
inline std::map<std::string, int> training_counts(const IterationRecord& it) {
  std::map<std::string, int> out;
  for (const CollectiveRecord& c : it.collectives)
    if (c.phase != Phase::init) ++out[c.op];
  return out;
}

inline std::vector<std::vector<int>> bucket_indices(const std::vector<core::DdpBucket>& buckets) {
  std::vector<std::vector<int>> out;
  for (const auto& b : buckets) out.push_back(b.indices);
  return out;
}
inline std::vector<std::int64_t> bucket_bytes(const std::vector<core::DdpBucket>& buckets) {
  std::vector<std::int64_t> out;
  for (const auto& b : buckets) out.push_back(b.bytes);
  return out;
}
inline std::vector<std::int64_t> bucket_limits(const std::vector<core::DdpBucket>& buckets) {
  std::vector<std::int64_t> out;
  for (const auto& b : buckets) out.push_back(b.size_limit);
  return out;
}

inline const core::FsdpUnitReport* find_unit(const PlanResult& result, const std::string& module) {
  for (const auto& unit : result.fsdp)
    if (unit.module == module) return &unit;
  return nullptr;
}

inline const core::DdpReport* find_ddp(const PlanResult& result, const std::string& module) {
  for (const auto& ddp : result.ddp)
    if (ddp.module == module) return &ddp;
  return nullptr;
}

// Every trainable parameter's managers: "ddp:<module>" per DDP instance whose variables contain it,
// "fsdp:<module>" per unit whose flat parameter holds it.
inline std::map<std::string, std::vector<std::string>> managers(const Model& model, const PlanResult& result) {
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& p : model.params)
    if (p.requires_grad) out[p.fqn];
  for (const auto& ddp : result.ddp) {
    const std::string prefix = ddp.module.empty() ? "" : ddp.module + ".";
    for (const std::string& name : ddp.params) out[prefix + name].push_back("ddp:" + ddp.module);
  }
  for (const auto& unit : result.fsdp)
    for (const std::string& name : unit.params) out[name].push_back("fsdp:" + unit.module);
  return out;
}

}  // namespace stratsim::test
