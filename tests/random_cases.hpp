// Random small models (nested Sequential containers of Linear / ReLU / RMSNorm, as model
// documents) and random plans (replicate with random bucket caps, find_unused_parameters,
// static_graph, comm hooks; fully_shard with random wrap policies, strategies, mixed precision;
// optional tensor parallelism and checkpointing; 1-D and 2-D meshes), shared by the planner's
// property tests and the real-training property tests. A seed always produces the same cases.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "stratsim/core/json_reader.hpp"
#include "stratsim/core/model.hpp"
#include "stratsim/core/model_io.hpp"

namespace stratsim::test {

class Random {
 public:
  explicit Random(std::uint32_t seed) : rng_(seed) {}
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }  // [lo, hi]
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  template <typename T>
  const T& pick(const std::vector<T>& items) {
    return items[static_cast<std::size_t>(uniform(0, static_cast<int>(items.size()) - 1))];
  }

 private:
  std::mt19937 rng_;
};

// ---- random models ------------------------------------------------------------------------------

struct ModelGen {
  Random& random;
  std::int64_t width = 8;
  int linears = 0;

  nlohmann::json leaf(const std::string& name) {
    const int kind = random.uniform(0, 5);
    if (kind <= 2 || linears == 0) {  // Linear most of the time
      const std::int64_t out = random.pick(std::vector<std::int64_t>{4, 8, 12, 16});
      nlohmann::json layer = {{"name", name}, {"type", "Linear"}, {"in_features", width}, {"out_features", out}};
      if (random.chance(0.25)) layer["bias"] = false;
      width = out;
      ++linears;
      return layer;
    }
    if (kind == 3) return {{"name", name}, {"type", "RMSNorm"}, {"dim", width}};
    return {{"name", name}, {"type", "ReLU"}};
  }

  nlohmann::json children(int depth) {
    nlohmann::json list = nlohmann::json::array();
    const int n = random.uniform(1, 3);
    for (int i = 0; i < n; ++i) {
      const std::string name = std::to_string(i);
      if (depth < 3 && random.chance(0.35)) {
        list.push_back({{"name", name}, {"type", "Sequential"}, {"children", children(depth + 1)}});
      } else {
        list.push_back(leaf(name));
      }
    }
    return list;
  }

  nlohmann::json model() {
    width = random.pick(std::vector<std::int64_t>{4, 8, 16});
    linears = 0;
    nlohmann::json doc = {{"name", "RandomNet"}, {"type", "Sequential"}, {"modules", children(0)}};
    if (linears == 0) doc["modules"].push_back(leaf("tail"));
    return doc;
  }
};

// ---- random plans -------------------------------------------------------------------------------

struct Case {
  std::string plan_text;
  std::string model_text;
};

// What a caller can leave out of the generated plans. The defaults generate every feature; a
// non-default option may change which random numbers later draws see, the defaults never do.
struct CaseOptions {
  bool mixed_precision = true;  // fully_shard(mixed_precision=...) on some units
  int max_world_size = 0;       // 0: no limit (worlds of up to 8 ranks)
  bool compress_hooks = true;   // replicate(comm_hook=fp16_compress / bf16_compress)
};

// The model a model document describes.
inline core::Model random_case_model(const nlohmann::json& doc, const std::string& origin = "model.json") {
  return core::parse_model(core::JsonReader(doc, origin));
}

// Modules of `model` (indices) that are not the root.
inline std::vector<int> non_root_modules(const core::Model& model) {
  std::vector<int> out;
  for (int m = 1; m < static_cast<int>(model.modules.size()); ++m) out.push_back(m);
  return out;
}

// Up to `count` pairwise disjoint (no ancestor relation) non-root subtrees.
inline std::vector<int> disjoint_subtrees(const core::Model& model, Random& random, int count) {
  std::vector<int> chosen;
  std::vector<int> candidates = non_root_modules(model);
  for (int attempt = 0; attempt < 8 && static_cast<int>(chosen.size()) < count && !candidates.empty(); ++attempt) {
    const int m = random.pick(candidates);
    bool ok = true;
    for (int c : chosen) ok = ok && !model.in_subtree(m, c) && !model.in_subtree(c, m);
    if (ok && model.subtree_numel(m) > 0) chosen.push_back(m);
  }
  return chosen;
}

inline nlohmann::json random_policy(Random& random) {
  switch (random.uniform(0, 4)) {
    case 0: return nullptr;
    case 1: return {{"module_types", {"Linear"}}};
    case 2: return {{"module_types", {"Sequential"}}};
    case 3: return {{"module_types", {"Linear", "RMSNorm"}}};
    default: return {{"min_num_params", random.uniform(10, 300)}};
  }
}

inline nlohmann::json fully_shard_step(Random& random, const std::string& module, const nlohmann::json& mesh_dim,
                                       bool hybrid_ok, const CaseOptions& options = {}) {
  nlohmann::json body = {{"module", module}};
  if (!mesh_dim.is_null()) body["mesh_dim"] = mesh_dim;
  std::vector<std::string> strategies{"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"};
  std::string strategy = random.pick(strategies);
  if (hybrid_ok && random.chance(0.5)) strategy = random.chance(0.5) ? "HYBRID_SHARD" : "_HYBRID_SHARD_ZERO2";
  body["strategy"] = strategy;
  if (strategy == "HYBRID_SHARD" || strategy == "_HYBRID_SHARD_ZERO2") body["mesh_dim"] = {"rep", "shard"};
  const nlohmann::json policy = random_policy(random);
  if (!policy.is_null()) body["policy"] = policy;
  if (random.chance(0.3)) body["use_orig_params"] = true;
  if (random.chance(0.3)) {
    // The same draws with or without mixed precision: the rest of the case does not change.
    const bool reduce_dtype = random.chance(0.5);
    if (options.mixed_precision) {
      body["mixed_precision"] = {{"param_dtype", "bfloat16"}};
      if (reduce_dtype) body["mixed_precision"]["reduce_dtype"] = "float32";
    }
  }
  if (random.chance(0.3))
    body["backward_prefetch"] = random.chance(0.5) ? nlohmann::json(nullptr) : nlohmann::json("BACKWARD_POST");
  if (random.chance(0.2)) body["forward_prefetch"] = true;
  if (random.chance(0.2)) body["sync_module_states"] = true;
  return {{"fully_shard", body}};
}

inline nlohmann::json replicate_step(Random& random, const std::string& module, const nlohmann::json& mesh_dim,
                                     const CaseOptions& options = {}) {
  nlohmann::json body = {{"module", module}};
  if (!mesh_dim.is_null()) body["mesh_dim"] = mesh_dim;
  const std::vector<double> caps{0, 0.0001, 0.0005, 0.001, 1, 25};  // 0: not given
  const double cap = random.pick(caps);
  if (cap > 0) body["bucket_cap_mb"] = cap;
  if (random.chance(0.3)) body["find_unused_parameters"] = true;
  if (random.chance(0.25)) body["static_graph"] = true;
  if (random.chance(0.3)) body["gradient_as_bucket_view"] = true;
  if (random.chance(0.2)) {
    const bool fp16 = random.chance(0.5);  // drawn either way, as for mixed precision
    if (options.compress_hooks) body["comm_hook"] = fp16 ? "fp16_compress" : "bf16_compress";
  }
  return {{"replicate", body}};
}

inline Case random_case(Random& random, const CaseOptions& options = {}) {
  ModelGen gen{random};
  const nlohmann::json model_doc = gen.model();
  const core::Model model = random_case_model(model_doc);

  // World sizes and 2-D mesh shapes within options.max_world_size (all of them by default).
  const auto fits = [&](int world) { return options.max_world_size <= 0 || world <= options.max_world_size; };
  std::vector<int> worlds;
  for (int world : {1, 2, 3, 4, 8})
    if (fits(world)) worlds.push_back(world);
  std::vector<std::vector<int>> shapes;
  for (const std::vector<int>& shape : std::vector<std::vector<int>>{{2, 2}, {2, 4}, {4, 2}, {3, 2}, {2, 3}})
    if (fits(shape[0] * shape[1])) shapes.push_back(shape);

  nlohmann::json plan;
  int mesh_kind = random.uniform(0, 2);  // 1-D world; 2-D dp x tp; 2-D rep x shard
  if (shapes.empty()) mesh_kind = 0;     // no 2-D mesh fits
  nlohmann::json data_dim = nullptr;
  bool hybrid_ok = false, tp = false;
  if (mesh_kind == 0) {
    plan["world_size"] = worlds.empty() ? 1 : random.pick(worlds);
  } else {
    const std::vector<int> shape = random.pick(shapes);
    plan["world_size"] = shape[0] * shape[1];
    if (mesh_kind == 1) {
      plan["mesh"] = {{"shape", shape}, {"dim_names", {"dp", "tp"}}};
      data_dim = "dp";
      tp = random.chance(0.6);
    } else {
      plan["mesh"] = {{"shape", shape}, {"dim_names", {"rep", "shard"}}};
      data_dim = random.chance(0.5) ? "rep" : "shard";
      hybrid_ok = true;
    }
  }
  plan["iterations"] = random.uniform(2, 4);
  plan["batch_size"] = random.uniform(1, 4);
  if (random.chance(0.3)) plan["gradient_accumulation_steps"] = 2;
  plan["torch_version"] = random.chance(0.5) ? "2.4" : "2.5";
  nlohmann::json steps = nlohmann::json::array();

  if (tp) {
    // Tensor parallelism on some Linear layers (parallelize_module comes first).
    nlohmann::json entries = nlohmann::json::object();
    for (const core::Module& m : model.modules)
      if (m.leaf == core::LeafKind::linear && random.chance(0.5))
        entries[m.fqn] = random.chance(0.5) ? "colwise" : "rowwise";
    if (!entries.empty())
      steps.push_back({{"parallelize_module", {{"module", ""}, {"mesh_dim", "tp"}, {"plan", entries}}}});
  }

  const bool ddp_root = random.chance(0.5);
  const std::vector<int> subtrees = disjoint_subtrees(model, random, random.uniform(0, 2));
  for (int m : subtrees) {
    const std::string& fqn = model.modules[static_cast<std::size_t>(m)].fqn;
    // replicate() may sit below fully_shard(); below replicate() only fully_shard() composes.
    if (!ddp_root && random.chance(0.5)) steps.push_back(replicate_step(random, fqn, data_dim, options));
    else steps.push_back(fully_shard_step(random, fqn, data_dim, hybrid_ok, options));
  }
  if (ddp_root) steps.push_back(replicate_step(random, "", data_dim, options));
  else steps.push_back(fully_shard_step(random, "", data_dim, hybrid_ok, options));
  if (random.chance(0.3)) {
    const std::vector<int> candidates = non_root_modules(model);
    steps.push_back(
        {{"checkpoint", {{"module", model.modules[static_cast<std::size_t>(random.pick(candidates))].fqn}}}});
  }
  plan["steps"] = steps;
  return {plan.dump(), model_doc.dump()};
}

}  // namespace stratsim::test
