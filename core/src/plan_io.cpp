#include <fmt/format.h>

#include "stratsim/core/enum_names.hpp"
#include "stratsim/core/errors.hpp"
#include "stratsim/core/json_reader.hpp"
#include "stratsim/core/limits.hpp"
#include "stratsim/core/plan.hpp"

namespace stratsim::core {
namespace {

// Names as PyTorch spells them; later entries of a value are aliases accepted in plans.
constexpr EnumNames<ShardingStrategy, 6> kStrategyNames{
    {{{ShardingStrategy::full_shard, "FULL_SHARD"},
      {ShardingStrategy::shard_grad_op, "SHARD_GRAD_OP"},
      {ShardingStrategy::no_shard, "NO_SHARD"},
      {ShardingStrategy::hybrid_shard, "HYBRID_SHARD"},
      {ShardingStrategy::hybrid_shard_zero2, "_HYBRID_SHARD_ZERO2"},
      {ShardingStrategy::hybrid_shard_zero2, "HYBRID_SHARD_ZERO2"}}}};

constexpr EnumNames<CommHook, 8> kCommHookNames{{{{CommHook::none, "none"},
                                                  {CommHook::allreduce, "allreduce"},
                                                  {CommHook::fp16_compress, "fp16_compress"},
                                                  {CommHook::bf16_compress, "bf16_compress"},
                                                  {CommHook::none, ""},
                                                  {CommHook::allreduce, "allreduce_hook"},
                                                  {CommHook::fp16_compress, "fp16_compress_hook"},
                                                  {CommHook::bf16_compress, "bf16_compress_hook"}}}};

constexpr EnumNames<BackwardPrefetch, 4> kBackwardPrefetchNames{{{{BackwardPrefetch::backward_pre, "BACKWARD_PRE"},
                                                                  {BackwardPrefetch::backward_post, "BACKWARD_POST"},
                                                                  {BackwardPrefetch::none, "NONE"},
                                                                  {BackwardPrefetch::none, "None"}}}};

// Built-in plans, so the CLI has something to run with no files at all.
const std::vector<std::pair<std::string, std::string>>& builtin_plans() {
  static const std::vector<std::pair<std::string, std::string>> plans = {
      {"ddp", R"json({"world_size": 2, "batch_size": 1,
                  "steps": [{"replicate": {"module": ""}}]})json"},
      {"fsdp", R"json({"world_size": 4, "batch_size": 2,
                   "steps": [{"fully_shard": {"module": "", "strategy": "FULL_SHARD",
                                              "policy": {"module_types": ["Linear"]}}}]})json"},
      {"ddp-tp", R"json({"world_size": 4, "mesh": {"shape": [2, 2], "dim_names": ["dp", "tp"]}, "batch_size": 1,
                     "steps": [{"parallelize_module": {"module": "", "mesh_dim": "tp",
                                 "plan": {"fc1": "colwise", "fc2": "rowwise", "fc3": "colwise", "fc4": "rowwise"}}},
                               {"replicate": {"module": "", "mesh_dim": "dp"}}]})json"},
      {"fsdp-tp", R"json({"world_size": 4, "mesh": {"shape": [2, 2], "dim_names": ["dp", "tp"]}, "batch_size": 2,
                      "steps": [{"parallelize_module": {"module": "", "mesh_dim": "tp",
                                  "plan": {"mlp.net1": {"style": "colwise", "input_layouts": "Shard(0)"},
                                           "mlp.net2": {"style": "rowwise", "output_layouts": "Shard(0)"}}}},
                                {"distribute_module": {"module": "mlp_norm", "mesh_dim": "tp", "input_layouts": "Shard(0)"}},
                                {"fully_shard": {"module": "", "mesh_dim": "dp"}}]})json"},
      // torchtitan's parallelize_llama on 8 GPUs as dp_shard 2 x tp 4: the Llama TP plan with
      // sequence parallelism and loss parallel (the embedding, final norm and output first, then
      // every block's), then FSDP2 per block and on the root (bfloat16 parameters, float32
      // reductions), clip_grad_norm_(max_norm=1) before AdamW. For the llama-style zoo models
      // (zoo:llama2-7b, ...).
      {"torchtitan-llama", R"json({"world_size": 8, "mesh": {"shape": [2, 4], "dim_names": ["dp_shard", "tp"]},
        "batch_size": 1, "torch_version": "2.15", "loss_parallel": true, "optimizer": {"type": "adamw", "max_norm": 1.0},
        "steps": [
          {"parallelize_module": {"module": "", "mesh_dim": "tp", "plan": {
            "tok_embeddings": {"style": "RowwiseParallel", "input_layouts": "Replicate()", "output_layouts": "Shard(1)"},
            "norm": "SequenceParallel",
            "output": {"style": "ColwiseParallel", "input_layouts": "Shard(1)", "output_layouts": "Shard(-1)",
                       "use_local_output": false}}}},
          {"parallelize_module": {"module": "layers", "mesh_dim": "tp", "plan": {
            "*.attention_norm": "SequenceParallel",
            "*.attention": {"style": "PrepareModuleInput", "input_layouts": ["Shard(1)", null],
                                   "desired_input_layouts": ["Replicate()", null]},
            "*.attention.wq": "ColwiseParallel",
            "*.attention.wk": "ColwiseParallel",
            "*.attention.wv": "ColwiseParallel",
            "*.attention.wo": {"style": "RowwiseParallel", "output_layouts": "Shard(1)"},
            "*.ffn_norm": "SequenceParallel",
            "*.feed_forward": {"style": "PrepareModuleInput", "input_layouts": ["Shard(1)"],
                                      "desired_input_layouts": ["Replicate()"]},
            "*.feed_forward.w1": "ColwiseParallel",
            "*.feed_forward.w2": {"style": "RowwiseParallel", "output_layouts": "Shard(1)"},
            "*.feed_forward.w3": "ColwiseParallel"}}},
          {"torch.distributed.fsdp.fully_shard": {"module": "layers.*", "mesh_dim": "dp_shard",
            "mp_policy": {"param_dtype": "bfloat16", "reduce_dtype": "float32"}}},
          {"torch.distributed.fsdp.fully_shard": {"module": "", "mesh_dim": "dp_shard",
            "mp_policy": {"param_dtype": "bfloat16", "reduce_dtype": "float32"}}}]})json"},
  };
  return plans;
}

std::vector<std::string> mesh_dims(const JsonReader& step, const Plan& plan, const char* key = "mesh_dim") {
  std::vector<std::string> dims = step.get_string_list(key);
  if (dims.empty() && step.has("device_mesh")) dims = step.get_string_list("device_mesh");
  for (const std::string& dim : dims)
    if (plan.mesh.dim_index(dim) < 0) {
      std::string names;
      for (const auto& n : plan.mesh.dim_names()) names += (names.empty() ? "" : ", ") + n;
      step.at(step.has(key) ? key : "device_mesh")
          .fail(fmt::format("no mesh dimension \"{}\" (the mesh has: {})", dim, names));
    }
  return dims;
}

std::optional<Placement> placement_field(const JsonReader& node, const char* key) {
  if (!node.has(key) || node.at(key).is_null()) return std::nullopt;
  JsonReader field = node.at(key);
  std::string text;
  if (field.is_array()) {  // [Shard(0)] as PyTorch writes placements
    if (field.size() != 1) field.fail("expected one placement (the styles act on a 1-D mesh)");
    text = field.at(std::size_t{0}).as_string();
  } else {
    text = field.as_string();
  }
  auto placement = parse_placement(text);
  if (!placement) field.fail(fmt::format("expected Shard(d), Replicate() or Partial(), got \"{}\"", text));
  return placement;
}

std::optional<DType> dtype_field(const JsonReader& node, const char* key) {
  if (!node.has(key) || node.at(key).is_null()) return std::nullopt;
  std::string text = node.at(key).as_string();
  auto dtype = parse_dtype(text);
  if (!dtype) node.at(key).fail(fmt::format("unknown dtype \"{}\"", text));
  return dtype;
}

// Python's type name for a JSON value, for PyTorch's "but got <class '...'>" wording.
std::string python_type(const nlohmann::json& value) {
  if (value.is_array()) return "<class 'list'>";
  if (value.is_object()) return "<class 'dict'>";
  if (value.is_boolean()) return "<class 'bool'>";
  if (value.is_number_float()) return "<class 'float'>";
  if (value.is_null()) return "<class 'NoneType'>";
  return "<class 'str'>";
}

bool is_torch_device(const std::string& text) {
  for (const char* type : {"cpu", "cuda", "meta", "xpu", "mps"}) {
    std::string prefix = type;
    if (text == prefix) return true;
    if (text.starts_with(prefix + ":")) {
      std::string index = text.substr(prefix.size() + 1);
      return !index.empty() && index.find_first_not_of("0123456789") == std::string::npos;
    }
  }
  return false;
}

ReplicateStep parse_replicate(const JsonReader& node, const Plan& plan, const std::string& where) {
  node.allow_only({"module", "mesh_dim", "device_mesh", "bucket_cap_mb", "find_unused_parameters",
                   "gradient_as_bucket_view", "static_graph", "broadcast_buffers", "init_sync", "comm_hook",
                   "ignored_modules", "device_id"});
  ReplicateStep step;
  step.module = node.get_string("module", "");
  step.mesh_dims = mesh_dims(node, plan);
  if (step.mesh_dims.size() > 1)
    node.at(node.has("mesh_dim") ? "mesh_dim" : "device_mesh").fail("replicate takes a 1-D mesh");
  if (node.has("bucket_cap_mb") && !node.at("bucket_cap_mb").is_null()) {
    step.bucket_cap_mb = node.at("bucket_cap_mb").as_number();
    if (*step.bucket_cap_mb <= 0) node.at("bucket_cap_mb").fail("expected a positive number of MiB");
  }
  step.find_unused_parameters = node.get_bool("find_unused_parameters", false);
  step.gradient_as_bucket_view = node.get_bool("gradient_as_bucket_view", false);
  step.static_graph = node.get_bool("static_graph", false);
  step.broadcast_buffers = node.get_bool("broadcast_buffers", true);
  step.init_sync = node.get_bool("init_sync", true);
  const std::string hook = node.get_string("comm_hook", "none");
  if (auto parsed = kCommHookNames.parse(hook)) step.comm_hook = *parsed;
  else
    node.at("comm_hook")
        .fail(fmt::format("unknown comm hook \"{}\" (expected allreduce, fp16_compress or bf16_compress)", hook));
  step.ignored_modules = node.get_string_list("ignored_modules");
  if (node.has("device_id") && !node.at("device_id").is_null()) {
    const nlohmann::json& id = node.at("device_id").value();
    bool ok = id.is_number_integer() || (id.is_string() && is_torch_device(id.get<std::string>()));
    // replicate() checks the type before anything else; same rule, same words.
    if (!ok)
      throw PlanError(
          fmt::format("{}: Expected device_id to be int or torch.device, but got {}", where, python_type(id)));
  }
  return step;
}

ShardingStrategy parse_strategy(const JsonReader& node) {
  std::string text = node.as_string();
  if (text.starts_with("ShardingStrategy.")) text = text.substr(17);
  if (auto strategy = kStrategyNames.parse(text)) return *strategy;
  node.fail(
      fmt::format("unknown sharding strategy \"{}\" (expected FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, "
                  "_HYBRID_SHARD_ZERO2)",
                  text));
}

FullyShardStep parse_fully_shard(const JsonReader& node, const Plan& plan) {
  node.allow_only({"module", "mesh_dim", "device_mesh", "strategy", "sharding_strategy", "policy", "auto_wrap_policy",
                   "mixed_precision", "cpu_offload", "backward_prefetch", "forward_prefetch", "use_orig_params",
                   "sync_module_states", "limit_all_gathers", "ignored_modules"});
  FullyShardStep step;
  step.module = node.get_string("module", "");
  step.mesh_dims = mesh_dims(node, plan);
  const char* strategy_key = node.has("strategy") ? "strategy" : "sharding_strategy";
  if (node.has(strategy_key) && !node.at(strategy_key).is_null()) step.strategy = parse_strategy(node.at(strategy_key));
  const bool hybrid =
      step.strategy == ShardingStrategy::hybrid_shard || step.strategy == ShardingStrategy::hybrid_shard_zero2;
  if (step.mesh_dims.size() > 2 || (step.mesh_dims.size() == 2 && !hybrid))
    node.at(node.has("mesh_dim") ? "mesh_dim" : "device_mesh")
        .fail("expected one mesh dimension (two, replicate then shard, for HYBRID_SHARD)");
  if (hybrid && step.mesh_dims.size() != 2)
    node.fail("HYBRID_SHARD needs a 2-D device mesh: mesh_dim: [replicate_dim, shard_dim]");
  const char* policy_key = node.has("policy") ? "policy" : "auto_wrap_policy";
  if (node.has(policy_key) && !node.at(policy_key).is_null()) {
    JsonReader policy = node.at(policy_key);
    policy.allow_only({"module_types", "min_num_params"});
    step.wrap_module_types = policy.get_string_list("module_types");
    if (policy.has("min_num_params")) {
      step.wrap_min_num_params = policy.at("min_num_params").as_int();
      if (*step.wrap_min_num_params <= 0) policy.at("min_num_params").fail("expected a positive integer");
    }
    if (step.wrap_module_types.empty() && !step.wrap_min_num_params)
      policy.fail("expected module_types (ModuleWrapPolicy) or min_num_params (size_based_auto_wrap_policy)");
  }
  if (node.has("mixed_precision") && !node.at("mixed_precision").is_null()) {
    JsonReader mp = node.at("mixed_precision");
    mp.allow_only({"param_dtype", "reduce_dtype", "buffer_dtype", "cast_forward_inputs", "cast_root_forward_inputs"});
    step.param_dtype = dtype_field(mp, "param_dtype");
    step.reduce_dtype = dtype_field(mp, "reduce_dtype");
    step.buffer_dtype = dtype_field(mp, "buffer_dtype");
  }
  if (node.has("cpu_offload") && !node.at("cpu_offload").is_null()) {
    JsonReader offload = node.at("cpu_offload");
    if (offload.is_object()) {
      offload.allow_only({"offload_params"});
      step.cpu_offload = offload.get_bool("offload_params", false);
    } else {
      step.cpu_offload = offload.as_bool();
    }
  }
  if (node.has("backward_prefetch")) {
    JsonReader prefetch = node.at("backward_prefetch");
    std::string text = prefetch.is_null() ? "NONE" : prefetch.as_string();
    if (text.starts_with("BackwardPrefetch.")) text = text.substr(17);
    if (auto parsed = kBackwardPrefetchNames.parse(text)) step.backward_prefetch = *parsed;
    else prefetch.fail(fmt::format("expected BACKWARD_PRE, BACKWARD_POST or null, got \"{}\"", text));
  }
  step.forward_prefetch = node.get_bool("forward_prefetch", false);
  step.use_orig_params = node.get_bool("use_orig_params", false);
  step.sync_module_states = node.get_bool("sync_module_states", false);
  step.limit_all_gathers = node.get_bool("limit_all_gathers", true);
  step.ignored_modules = node.get_string_list("ignored_modules");
  return step;
}

// FSDP2's fully_shard(module, mesh=..., reshard_after_forward=..., mp_policy=MixedPrecisionPolicy(...),
// offload_policy=CPUOffloadPolicy()).
FullyShard2Step parse_fully_shard2(const JsonReader& node, const Plan& plan) {
  node.allow_only({"module", "mesh_dim", "device_mesh", "mesh", "reshard_after_forward", "mp_policy", "offload_policy",
                   "reshard_after_backward_in_accumulation"});
  FullyShard2Step step;
  step.module = node.get_string("module", "");
  const char* mesh_key = node.has("mesh") ? "mesh" : node.has("device_mesh") ? "device_mesh" : "mesh_dim";
  step.mesh_dims = mesh_dims(node, plan, mesh_key);
  if (step.mesh_dims.size() > 2)
    node.at(mesh_key).fail("expected one mesh dimension (FSDP) or two, replicate then shard (HSDP)");
  if (node.has("reshard_after_forward") && !node.at("reshard_after_forward").is_null()) {
    JsonReader reshard = node.at("reshard_after_forward");
    if (reshard.value().is_number_integer()) step.reshard_after_forward_ranks = reshard.as_int();
    else step.reshard_after_forward = reshard.as_bool();
  }
  if (node.has("mp_policy") && !node.at("mp_policy").is_null()) {
    JsonReader mp = node.at("mp_policy");
    mp.allow_only({"param_dtype", "reduce_dtype", "output_dtype", "cast_forward_inputs"});
    step.param_dtype = dtype_field(mp, "param_dtype");
    step.reduce_dtype = dtype_field(mp, "reduce_dtype");
    step.output_dtype = dtype_field(mp, "output_dtype");
    step.cast_forward_inputs = mp.get_bool("cast_forward_inputs", true);
  }
  if (node.has("offload_policy") && !node.at("offload_policy").is_null()) {
    JsonReader offload = node.at("offload_policy");
    if (offload.is_object()) {
      offload.allow_only({"pin_memory"});
      step.offload_params = true;
    } else {
      step.offload_params = offload.as_bool();
    }
  }
  step.reshard_after_backward_in_accumulation = node.get_bool("reshard_after_backward_in_accumulation", true);
  return step;
}

// PrepareModuleInput / PrepareModuleOutput take one layout per positional input (output): a
// placement, or a list whose first entry is the module's first tensor and the rest null (None),
// as torchtitan writes input_layouts=(Shard(1), None).
std::optional<Placement> first_layout_field(const JsonReader& node, const char* key) {
  if (!node.has(key) || node.at(key).is_null()) return std::nullopt;
  JsonReader field = node.at(key);
  if (!field.is_array()) return placement_field(node, key);
  if (field.size() == 0) field.fail("expected at least one layout");
  for (std::size_t i = 1; i < field.size(); ++i)
    if (!field.at(i).is_null())
      field.at(i).fail("only a module's first positional tensor is modelled: the other layouts must be null (None)");
  JsonReader first = field.at(std::size_t{0});
  if (first.is_null()) return std::nullopt;
  const std::string text = first.as_string();
  auto placement = parse_placement(text);
  if (!placement) first.fail(fmt::format("expected Shard(d), Replicate() or Partial(), got \"{}\"", text));
  return placement;
}

// How many layouts a PrepareModule* field lists (a bare placement is one).
std::size_t layout_count(const JsonReader& node, const char* key) {
  if (!node.has(key) || node.at(key).is_null()) return 0;
  return node.at(key).is_array() ? node.at(key).size() : 1;
}

// PrepareModuleInput(input_layouts, desired_input_layouts) and PrepareModuleOutput: both lists, of
// one length ("... should have same length!", PyTorch's words); a null desired layout leaves that
// tensor as declared.
void prepare_layouts(const JsonReader& node, const char* declared_key, const char* desired_key,
                     std::optional<Placement>& declared, std::optional<Placement>& desired) {
  if (layout_count(node, declared_key) != layout_count(node, desired_key))
    node.fail(fmt::format("{} and {} should have same length!", declared_key, desired_key));
  declared = first_layout_field(node, declared_key);
  desired = first_layout_field(node, desired_key);
  if (declared && !desired) desired = declared;
  if (desired && !declared)
    node.at(desired_key).fail(fmt::format("a desired layout for a tensor whose {} is null", declared_key));
}

TPStyle parse_tp_style(const JsonReader& node, const std::string& style) {
  if (style == "colwise" || style == "ColwiseParallel") return TPStyle::colwise;
  if (style == "rowwise" || style == "RowwiseParallel") return TPStyle::rowwise;
  if (style == "sequence_parallel" || style == "SequenceParallel") return TPStyle::sequence_parallel;
  if (style == "prepare_input" || style == "PrepareModuleInput") return TPStyle::prepare_input;
  if (style == "prepare_output" || style == "PrepareModuleOutput") return TPStyle::prepare_output;
  node.fail(fmt::format(
      "unknown style \"{}\" (expected ColwiseParallel, RowwiseParallel, SequenceParallel, PrepareModuleInput or "
      "PrepareModuleOutput)",
      style));
}

TPModuleSpec parse_tp_spec(const JsonReader& node) {
  TPModuleSpec spec;
  if (node.is_string()) {
    spec.style = parse_tp_style(node, node.as_string());
    if (spec.style == TPStyle::prepare_input || spec.style == TPStyle::prepare_output)
      node.fail("PrepareModuleInput / PrepareModuleOutput need their layouts: write {\"style\": ..., ...}");
    return spec;
  }
  spec.style = parse_tp_style(node.at("style"), node.at("style").as_string());
  switch (spec.style) {
    case TPStyle::colwise:
    case TPStyle::rowwise:
      node.allow_only({"style", "input_layouts", "output_layouts", "use_local_output"});
      spec.input_layout = placement_field(node, "input_layouts");
      spec.output_layout = placement_field(node, "output_layouts");
      break;
    case TPStyle::sequence_parallel:
      node.allow_only({"style", "sequence_dim", "use_local_output"});
      {
        const std::int64_t dim = node.get_int("sequence_dim", 1);
        if (dim < -8 || dim > 8) node.at("sequence_dim").fail("expected a tensor dim (-8 to 8)");
        spec.sequence_dim = static_cast<int>(dim);
      }
      break;
    case TPStyle::prepare_input:
      node.allow_only({"style", "input_layouts", "desired_input_layouts", "use_local_output"});
      prepare_layouts(node, "input_layouts", "desired_input_layouts", spec.input_layout, spec.desired_input_layout);
      break;
    case TPStyle::prepare_output:
      node.allow_only({"style", "output_layouts", "desired_output_layouts", "use_local_output"});
      prepare_layouts(node, "output_layouts", "desired_output_layouts", spec.output_layout, spec.desired_output_layout);
      break;
  }
  if (node.has("use_local_output")) spec.use_local_output = node.get_bool("use_local_output", true);
  return spec;
}

ParallelizeStep parse_parallelize(const JsonReader& node, const Plan& plan) {
  node.allow_only({"module", "mesh_dim", "device_mesh", "plan", "parallelize_plan"});
  ParallelizeStep step;
  step.module = node.get_string("module", "");
  step.mesh_dims = mesh_dims(node, plan);
  if (step.mesh_dims.size() != 1) node.fail("parallelize_module needs one mesh dimension (mesh_dim)");
  JsonReader entries = node.at(node.has("plan") ? "plan" : "parallelize_plan");
  for (const std::string& key : entries.keys()) step.plan.emplace_back(key, parse_tp_spec(entries.at(key)));
  if (step.plan.empty()) entries.fail("the plan names no module");
  return step;
}

DistributeModuleStep parse_distribute(const JsonReader& node, const Plan& plan) {
  node.allow_only({"module", "mesh_dim", "device_mesh", "input_layouts", "output_to_local"});
  DistributeModuleStep step;
  step.module = node.at("module").as_string();
  step.mesh_dims = mesh_dims(node, plan);
  if (step.mesh_dims.size() != 1) node.fail("distribute_module needs one mesh dimension (mesh_dim)");
  step.input_layout = placement_field(node, "input_layouts");
  step.output_to_local = node.get_bool("output_to_local", true);
  return step;
}

void parse_mesh(const JsonReader& doc, Plan& plan) {
  std::vector<int> shape;
  std::vector<std::string> names;
  if (doc.has("mesh")) {
    JsonReader mesh = doc.at("mesh");
    mesh.allow_only({"shape", "dim_names", "mesh_dim_names"});
    JsonReader shape_node = mesh.at("shape");
    shape_node.expect_array();
    if (shape_node.size() == 0) shape_node.fail("the mesh needs at least one dimension");
    for (std::size_t i = 0; i < shape_node.size(); ++i) {
      std::int64_t extent = shape_node.at(i).as_int();
      if (extent <= 0 || extent > (1 << 24)) shape_node.at(i).fail("expected a positive mesh extent");
      shape.push_back(static_cast<int>(extent));
    }
    names = mesh.get_string_list(mesh.has("dim_names") ? "dim_names" : "mesh_dim_names");
    if (names.empty())
      for (std::size_t i = 0; i < shape.size(); ++i) names.push_back(fmt::format("dim{}", i));
    if (names.size() != shape.size())
      mesh.at(mesh.has("dim_names") ? "dim_names" : "mesh_dim_names")
          .fail(fmt::format("{} names for a {}-D mesh", names.size(), shape.size()));
    for (std::size_t i = 0; i < names.size(); ++i)
      for (std::size_t j = 0; j < i; ++j)
        if (names[i] == names[j]) mesh.fail(fmt::format("duplicate mesh dimension name \"{}\"", names[i]));
  } else {
    shape = {plan.world_size};
    names = {"world"};
  }
  std::int64_t product = 1;
  for (int extent : shape) product *= extent;
  if (product != plan.world_size)
    doc.at(doc.has("mesh") ? "mesh" : "world_size")
        .fail(fmt::format("mesh shape multiplies to {} ranks but world_size is {}", product, plan.world_size));
  plan.mesh = DeviceMesh(shape, names);
}

OptimizerConfig parse_optimizer(const JsonReader& node) {
  node.allow_only({"type", "lr", "momentum", "weight_decay", "amsgrad", "master_weights", "foreach", "fused", "betas",
                   "eps", "max_norm", "grad_scaler"});
  OptimizerConfig config;
  std::string type = node.get_string("type", "sgd");
  if (type == "sgd" || type == "SGD") config.kind = OptimizerKind::sgd;
  else if (type == "adam" || type == "Adam") config.kind = OptimizerKind::adam;
  else if (type == "adamw" || type == "AdamW") config.kind = OptimizerKind::adamw;
  else node.at("type").fail(fmt::format("unknown optimizer \"{}\" (expected sgd, adam or adamw)", type));
  config.lr = node.get_number("lr", config.lr);
  config.momentum = node.get_number("momentum", 0.0);
  config.weight_decay = node.get_number("weight_decay", 0.0);
  config.amsgrad = node.get_bool("amsgrad", false);
  config.master_weights = node.get_bool("master_weights", false);
  config.grad_scaler = node.get_bool("grad_scaler", false);
  if (node.has("max_norm")) {
    config.max_norm = node.get_number("max_norm", 0.0);
    if (!(config.max_norm > 0)) node.at("max_norm").fail("expected a positive number (the gradient norm to clip to)");
  }
  return config;
}

TorchVersion parse_version(const JsonReader& node) {
  std::string text = node.is_number() ? fmt::format("{}", node.as_number()) : node.as_string();
  TorchVersion version;
  if (std::sscanf(text.c_str(), "%d.%d", &version.major, &version.minor) != 2 || version.major < 1)
    node.fail(fmt::format("expected a version like \"2.4\", got \"{}\"", text));
  // Rules are known up to the release the golden vectors were recorded with; a later one would be
  // planned as if it were that one, which is not what the user asked for.
  if (version.major > 2 || (version.major == 2 && version.minor > kNewestTorchMinor))
    node.fail(fmt::format("stratsim knows PyTorch's rules up to 2.{}, got \"{}\"", kNewestTorchMinor, text));
  return version;
}

// FSDP1: the seeds' composable fully_shard (before 2.6 the bare name) and the wrapper.
bool is_fsdp1_call(const std::string& call) {
  return call == "fully_shard" || call == "FSDP" || call == "FullyShardedDataParallel" ||
         call == "torch.distributed._composable.fully_shard" ||
         call == "torch.distributed.fsdp.FullyShardedDataParallel";
}

}  // namespace

std::string TorchVersion::str() const { return fmt::format("{}.{}", major, minor); }

std::string_view strategy_name(ShardingStrategy strategy) { return kStrategyNames.name(strategy); }

std::string_view comm_hook_name(CommHook hook) { return kCommHookNames.name(hook); }

Plan parse_plan(const JsonReader& doc) {
  doc.allow_only({"world_size", "mesh", "batch_size", "seq_len", "input_requires_grad", "iterations",
                  "gradient_accumulation_steps", "optimizer", "torch_version", "device_memory_gb", "loss_parallel",
                  "steps", "format"});
  Plan plan;
  plan.origin = doc.file();
  plan.world_size = static_cast<int>(doc.at("world_size").as_int());
  if (plan.world_size <= 0 || plan.world_size > (1 << 24)) doc.at("world_size").fail("expected a positive rank count");
  parse_mesh(doc, plan);
  plan.batch_size = doc.get_int("batch_size", 1);
  if (plan.batch_size <= 0 || plan.batch_size > kMaxExtent)
    doc.at("batch_size").fail("expected a positive integer up to 2^31");
  plan.seq_len = doc.get_int("seq_len", 0);
  if (plan.seq_len < 0 || plan.seq_len > kMaxExtent) doc.at("seq_len").fail("expected a positive integer up to 2^31");
  plan.input_requires_grad = doc.get_bool("input_requires_grad", false);
  plan.iterations = static_cast<int>(doc.get_int("iterations", 0));
  if (plan.iterations < 0 || plan.iterations > 1000) doc.at("iterations").fail("expected 1 to 1000");
  plan.gradient_accumulation_steps = static_cast<int>(doc.get_int("gradient_accumulation_steps", 1));
  if (plan.gradient_accumulation_steps <= 0) doc.at("gradient_accumulation_steps").fail("expected a positive integer");
  if (doc.has("optimizer")) plan.optimizer = parse_optimizer(doc.at("optimizer"));
  if (doc.has("torch_version")) plan.torch_version = parse_version(doc.at("torch_version"));
  plan.loss_parallel = doc.get_bool("loss_parallel", false);
  if (doc.has("device_memory_gb") && !doc.at("device_memory_gb").is_null()) {
    double gib = doc.at("device_memory_gb").as_number();
    if (gib <= 0) doc.at("device_memory_gb").fail("expected a positive number of GiB");
    plan.device_memory_gib = gib;
  }
  if (!doc.has("steps")) return plan;
  JsonReader steps = doc.at("steps");
  steps.expect_array();
  for (std::size_t i = 0; i < steps.size(); ++i) {
    JsonReader entry = steps.at(i);
    entry.expect_object();
    if (entry.size() != 1)
      entry.fail(
          "each step is one call: {\"replicate\": {...}}, {\"fully_shard\": {...}}, {\"checkpoint\": {...}}, "
          "{\"parallelize_module\": {...}} or {\"distribute_module\": {...}}");
    const std::string call = entry.keys().front();
    JsonReader body = entry.at(call);
    PlanStep step;
    step.index = static_cast<int>(i);
    step.where = fmt::format("{}: steps[{}] ({})", doc.file(), i, call);
    if (call == "replicate") step.body = parse_replicate(body, plan, step.where);
    else if (is_fsdp1_call(call)) {
      if (call == "fully_shard" && plan.torch_version.at_least(2, 6))
        entry.fail(
            fmt::format("\"fully_shard\" means FSDP2 from PyTorch 2.6 (torch_version is {}): name the API by "
                        "its import path, \"torch.distributed.fsdp.fully_shard\" (FSDP2) or "
                        "\"torch.distributed._composable.fully_shard\" (FSDP1)",
                        plan.torch_version.str()));
      step.body = parse_fully_shard(body, plan);
    } else if (call == "torch.distributed.fsdp.fully_shard" || call == "torch.distributed._composable.fsdp.fully_shard")
      step.body = parse_fully_shard2(body, plan);
    else if (call == "checkpoint") {
      body.allow_only({"module", "policy", "api", "use_reentrant"});
      CheckpointStep checkpoint{body.at("module").as_string()};
      const std::string policy = body.get_string("policy", "full");
      if (policy == "selective_op") checkpoint.policy = CheckpointPolicy::selective_op;
      else if (policy != "full")
        body.at("policy").fail(fmt::format("unknown policy \"{}\" (expected full or selective_op)", policy));
      const std::string api = body.get_string("api", "checkpoint_wrapper");
      if (api == "composable") checkpoint.api = CheckpointApi::composable;
      else if (api != "checkpoint_wrapper")
        body.at("api").fail(fmt::format("unknown api \"{}\" (expected checkpoint_wrapper or composable)", api));
      checkpoint.use_reentrant = body.get_bool("use_reentrant", false);
      // torch.utils.checkpoint refuses a context_fn (the selective policy's) under reentrant
      // checkpointing, and composable checkpoint() refuses use_reentrant=True.
      if (checkpoint.use_reentrant && checkpoint.policy == CheckpointPolicy::selective_op)
        body.at("use_reentrant").fail("Passing context_fn is only supported when use_reentrant=False.");
      if (checkpoint.use_reentrant && checkpoint.api == CheckpointApi::composable)
        body.at("use_reentrant")
            .fail(
                "use_reentrant=True is not supported in composable checkpoint. Please use "
                "torch.utils.checkpoint.checkpoint instead.");
      step.body = std::move(checkpoint);
    } else if (call == "parallelize_module") step.body = parse_parallelize(body, plan);
    else if (call == "distribute_module") step.body = parse_distribute(body, plan);
    else
      entry.fail(
          fmt::format("unknown call \"{}\" (expected replicate, fully_shard (FSDP1), "
                      "torch.distributed.fsdp.fully_shard (FSDP2), checkpoint, parallelize_module or "
                      "distribute_module)",
                      call));
    plan.steps.push_back(std::move(step));
  }
  return plan;
}

std::vector<std::string> builtin_plan_names() {
  std::vector<std::string> names;
  for (const auto& [name, text] : builtin_plans()) names.push_back(name);
  return names;
}

nlohmann::json plan_document(const std::string& spec) {
  if (spec.starts_with("builtin:")) {
    const std::string name = spec.substr(8);
    for (const auto& [builtin, text] : builtin_plans())
      if (builtin == name) return parse_document(text, spec, false);
    std::string names;
    for (const auto& n : builtin_plan_names()) names += (names.empty() ? "" : ", ") + n;
    throw InputError(fmt::format("{}: no built-in plan \"{}\" (available: {})", spec, name, names));
  }
  return load_document(spec);
}

Plan load_plan(const std::string& spec) {
  const nlohmann::json doc = plan_document(spec);
  return parse_plan(JsonReader(doc, spec));
}

}  // namespace stratsim::core
