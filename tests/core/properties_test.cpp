// Property tests of the planner over random small models (nested Sequential containers of
// Linear / ReLU / RMSNorm, as model documents) and random plans (replicate with random bucket
// caps, find_unused_parameters, static_graph, comm hooks; fully_shard with random wrap policies,
// strategies, mixed precision; optional tensor parallelism and checkpointing; 1-D and 2-D meshes).
// The generators live in tests/random_cases.hpp. Fixed seeds: the same cases run every time.
//
// Properties:
//  * every trainable parameter has exactly one manager: one DDP instance (and then exactly one
//    bucket of each of its layouts) or one FSDP unit;
//  * bytes are conserved: each DDP layout's buckets add up to the instance's parameter bytes (the
//    local tensor-parallel shards, derived from the plan, when TP is present), and so do the bucket
//    all-reduces of every synced iteration; FSDP units hold their local shards plus alignment, and
//    their collectives move N, W*S or S elements of the unit;
//  * SPMD consistency: every rank issues the same (op, kind, bytes, group) sequence, each
//    collective's group contains the planned rank and has the group's size, and a group computed
//    from any of its members has the same members.
#include <gtest/gtest.h>

#include "../random_cases.hpp"
#include "planner_test_support.hpp"

using namespace stratsim::core;
using namespace stratsim::test;
using nlohmann::json;

namespace {

// ---- checks ---------------------------------------------------------------------------------------

// The bytes a rank holds of `param` after tensor parallelism, derived from the plan alone (not from
// the planner's layouts): the random plans put ColwiseParallel / RowwiseParallel on Linear layers by
// exact FQN, on mesh dim "tp". Colwise shards weight [out, in] and bias [out] on dim 0, Rowwise shards
// the weight on dim 1 and keeps the bias replicated; a shard is ceil(n / tp) (torch.chunk's largest,
// which the planner models for every rank).
std::int64_t local_bytes(const Plan& plan, const Parameter& param, const std::string& module_fqn) {
  std::int64_t numel = param.numel();
  for (const PlanStep& step : plan.steps) {
    const auto* tp = std::get_if<ParallelizeStep>(&step.body);
    if (tp == nullptr) continue;
    const int tp_size = plan.mesh.dim_size(plan.mesh.dim_index("tp"));
    for (const auto& [name, spec] : tp->plan) {
      if (name != module_fqn) continue;
      const int dim = spec.style == TPStyle::colwise ? 0 : (param.name == "weight" ? 1 : -1);
      if (dim < 0) continue;  // a Rowwise bias stays replicated
      const std::int64_t extent = param.shape[static_cast<std::size_t>(dim)];
      numel = numel / extent * ((extent + tp_size - 1) / tp_size);
    }
  }
  return numel * dtype_size(param.dtype);
}

std::int64_t local_bytes(const Model& model, const Plan& plan, const std::string& fqn) {
  const auto& param = model.params[static_cast<std::size_t>(model.find_param(fqn))];
  return local_bytes(plan, param, model.modules[static_cast<std::size_t>(param.module)].fqn);
}

void check_managers(const Model& model, const PlanResult& r) {
  for (const auto& [name, list] : managers(model, r)) EXPECT_EQ(list.size(), 1u) << name;
}

void check_ddp_layouts(const Model& model, const Plan& plan, const PlanResult& r) {
  for (const DdpReport& ddp : r.ddp) {
    SCOPED_TRACE("ddp " + ddp.module);
    const std::string prefix = ddp.module.empty() ? "" : ddp.module + ".";
    std::multiset<std::string> expected;
    for (const std::string& name : ddp.params) expected.insert(prefix + name);
    std::int64_t model_bytes = 0;
    for (const std::string& name : expected) model_bytes += local_bytes(model, plan, name);

    std::vector<const std::vector<DdpBucket>*> layouts{&ddp.initial, &ddp.compiled};
    if (!ddp.rebuilt.empty()) layouts.push_back(&ddp.rebuilt);
    std::int64_t total = -1;
    for (const auto* layout : layouts) {
      if (layout == &ddp.compiled && layout->empty()) continue;  // no synced backward: no compiled figure
      std::multiset<std::string> seen;
      std::multiset<int> indices;
      std::int64_t bytes = 0;
      for (const DdpBucket& bucket : *layout) {
        EXPECT_FALSE(bucket.params.empty());
        EXPECT_EQ(bucket.params.size(), bucket.indices.size());
        seen.insert(bucket.params.begin(), bucket.params.end());
        indices.insert(bucket.indices.begin(), bucket.indices.end());
        bytes += bucket.bytes;
      }
      EXPECT_EQ(seen, expected);  // each parameter in exactly one bucket
      std::multiset<int> all;
      for (int i = 0; i < static_cast<int>(ddp.params.size()); ++i) all.insert(i);
      EXPECT_EQ(indices, all);
      if (total < 0) total = bytes;
      EXPECT_EQ(bytes, total);  // every layout carries the same bytes
    }
    EXPECT_EQ(total, model_bytes);  // the local (tensor-parallel) shards, when TP is present

    // Bucket all-reduces of each synced iteration carry exactly the instance's gradients.
    const ReplicateStep* config = nullptr;
    for (const PlanStep& step : plan.steps)
      if (const auto* rep = std::get_if<ReplicateStep>(&step.body); rep && rep->module == ddp.module) config = rep;
    ASSERT_NE(config, nullptr);
    const bool compress = config->comm_hook == CommHook::fp16_compress || config->comm_hook == CommHook::bf16_compress;
    for (const IterationRecord& it : r.iterations) {
      Filter f = op("c10d.allreduce_", phase_of(Phase::backward), "ddp bucket");
      f.module = ddp.module;
      const auto ars = select(it, f);
      std::int64_t bytes = 0;
      for (const auto& c : ars) bytes += c.bytes;
      if (!it.sync) {
        EXPECT_TRUE(ars.empty()) << describe(it);
      } else {
        EXPECT_EQ(bytes, compress ? total / 2 : total) << describe(it);
      }
    }
  }
}

void check_fsdp_units(const Model& model, const Plan& plan, const PlanResult& r) {
  for (const FsdpUnitReport& unit : r.fsdp) {
    SCOPED_TRACE("fsdp unit " + unit.module);
    if (unit.params.empty()) continue;
    std::int64_t numel = 0;
    for (const std::string& name : unit.params) {
      const auto& p = model.params[static_cast<std::size_t>(model.find_param(name))];
      numel += local_bytes(model, plan, name) / dtype_size(p.dtype);
    }
    // The flat parameter holds the local shards plus alignment padding (use_orig_params aligns
    // each parameter to 16 bytes, under 16 elements each), never less.
    EXPECT_GE(unit.numel, numel);
    EXPECT_LE(unit.numel, numel + 16 * static_cast<std::int64_t>(unit.params.size()));
    const int world = group_size_by_name(plan, unit.group);
    if (unit.strategy == ShardingStrategy::no_shard) {
      EXPECT_EQ(unit.shard_numel, unit.numel);
      EXPECT_EQ(unit.padded_numel, unit.numel);
    } else {
      EXPECT_EQ(unit.shard_numel, (unit.numel + world - 1) / world);
      EXPECT_EQ(unit.padded_numel, unit.shard_numel * world);
    }
    for (const IterationRecord& it : r.iterations)
      for (const CollectiveRecord& c : it.collectives) {
        if (c.module != unit.module || c.reason.find("fsdp unit") == std::string::npos) continue;
        const std::int64_t d = dtype_size(c.dtype);
        if (c.op == "c10d._allgather_base_") {
          EXPECT_EQ(c.bytes, unit.padded_numel * d) << describe(c);
          EXPECT_EQ(c.input_bytes, unit.shard_numel * d);
          EXPECT_EQ(c.group, unit.group);
        } else if (c.op == "c10d._reduce_scatter_base_") {
          EXPECT_EQ(c.bytes, unit.padded_numel * d) << describe(c);
          EXPECT_EQ(c.output_bytes, unit.shard_numel * d);
          EXPECT_EQ(c.group, unit.group);
        } else if (c.op == "c10d.allreduce_") {
          if (unit.strategy == ShardingStrategy::no_shard) {
            EXPECT_EQ(c.bytes, unit.numel * d) << describe(c);
          } else {
            EXPECT_EQ(c.bytes, unit.shard_numel * d) << describe(c);  // HSDP: the sharded gradient
            EXPECT_EQ(c.group, unit.replicate_group);
          }
        }
        if (!it.sync) {
          EXPECT_NE(c.op, "c10d._reduce_scatter_base_") << describe(c);
        }
      }
  }
}

struct Signature {
  int iteration;
  std::string op;
  CollectiveKind kind;
  std::int64_t bytes;
  std::string group;
  bool operator==(const Signature&) const = default;
};

std::vector<Signature> signature(const PlanResult& r) {
  std::vector<Signature> out;
  for (const IterationRecord& it : r.iterations)
    for (const CollectiveRecord& c : it.collectives) out.push_back({it.index, c.op, c.kind, c.bytes, c.group});
  return out;
}

void check_ranks(const Model& model, const Plan& plan, const PlanResult& r0) {
  std::vector<PlanResult> results;
  for (int rank = 0; rank < plan.world_size; ++rank)
    results.push_back(rank == 0 ? r0 : plan_training(model, plan, {rank, 0}));
  const auto reference = signature(r0);
  for (int rank = 0; rank < plan.world_size; ++rank) {
    const PlanResult& r = results[static_cast<std::size_t>(rank)];
    EXPECT_TRUE(signature(r) == reference) << "rank " << rank << " issues a different sequence";
    ASSERT_EQ(r.group_ranks.size(), r.program.groups.size());
    for (std::size_t g = 0; g < r.program.groups.size(); ++g) {
      const auto& members = r.group_ranks[g];
      EXPECT_EQ(static_cast<int>(members.size()), r.program.groups[g].size);
      EXPECT_EQ(static_cast<int>(members.size()), group_size_by_name(plan, r.program.groups[g].name));
      EXPECT_NE(std::find(members.begin(), members.end(), rank), members.end()) << "rank " << rank;
      // Every member computes the same group.
      for (int member : members) {
        const PlanResult& other = results[static_cast<std::size_t>(member)];
        ASSERT_LT(g, other.group_ranks.size());
        EXPECT_EQ(other.group_ranks[g], members)
            << "group " << r.program.groups[g].name << " from ranks " << rank << " and " << member;
      }
    }
    for (const IterationRecord& it : r.iterations)
      for (const CollectiveRecord& c : it.collectives) {
        ASSERT_GE(c.group_id, 0);
        ASSERT_LT(static_cast<std::size_t>(c.group_id), r.group_ranks.size());
        EXPECT_EQ(r.program.groups[static_cast<std::size_t>(c.group_id)].name, c.group);
      }
  }
}

}  // namespace

TEST(PlannerProperties, RandomModelsAndPlans) {
  Random random(20240611);
  constexpr int kCases = 300;
  int ddp_cases = 0, fsdp_cases = 0, tp_cases = 0, two_d = 0, rejected = 0;
  for (int i = 0; i < kCases; ++i) {
    const Case c = random_case(random);
    SCOPED_TRACE("case " + std::to_string(i) + "\nmodel: " + c.model_text + "\nplan: " + c.plan_text);
    const Model model = model_from_json(json::parse(c.model_text));
    const Plan plan = plan_from_json(c.plan_text);
    PlanResult r;
    try {
      r = plan_training(model, plan, {0, 0});
    } catch (const PlanError& e) {
      // PyTorch rejects replicate() of a module whose parameters all went to fully_shard.
      const bool expected = std::string(e.what()).find("DistributedDataParallel is not needed") != std::string::npos;
      EXPECT_TRUE(expected) << "the planner rejected a valid plan: " << e.what();
      rejected += expected ? 1 : 0;
      continue;
    }
    bool tensor_parallel = false;
    for (const PlanStep& step : plan.steps)
      tensor_parallel = tensor_parallel || std::holds_alternative<ParallelizeStep>(step.body);
    ddp_cases += r.ddp.empty() ? 0 : 1;
    fsdp_cases += r.fsdp.empty() ? 0 : 1;
    tp_cases += tensor_parallel ? 1 : 0;
    two_d += plan.mesh.ndim() == 2 ? 1 : 0;

    check_managers(model, r);
    check_ddp_layouts(model, plan, r);
    check_fsdp_units(model, plan, r);
    check_ranks(model, plan, r);
    if (HasFailure()) break;  // one readable failing case is enough
  }
  // The generator covers every family.
  EXPECT_LT(rejected, kCases / 4);  // plans PyTorch refuses are checked for the error, not counted
  EXPECT_GT(ddp_cases, kCases / 5);
  EXPECT_GT(fsdp_cases, kCases / 5);
  EXPECT_GT(tp_cases, kCases / 20);
  EXPECT_GT(two_d, kCases / 5);
}

// The same properties on the zoo's seed models with hand-picked plans, so a failure names a model
// everyone knows.
TEST(PlannerProperties, SeedModelsOnTwoDimensionalMeshes) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"zoo:Net", R"({"world_size":8,"mesh":{"shape":[4,2],"dim_names":["dp","tp"]},"steps":[
          {"parallelize_module":{"module":"","mesh_dim":"tp","plan":{"fc1":"colwise","fc2":"rowwise","fc3":"colwise","fc4":"rowwise"}}},
          {"replicate":{"module":"","mesh_dim":"dp","bucket_cap_mb":10}}]})"},
      {"zoo:CompositeParamModel", R"({"world_size":8,"mesh":{"shape":[2,4],"dim_names":["rep","shard"]},"steps":[
          {"replicate":{"module":"u1","mesh_dim":"rep"}},
          {"fully_shard":{"module":"","strategy":"HYBRID_SHARD","mesh_dim":["rep","shard"],"policy":{"module_types":["UnitModule"]}}}]})"},
      {"zoo:CompositeModel",
       R"({"world_size":6,"mesh":{"shape":[3,2],"dim_names":["dp","tp"]},"gradient_accumulation_steps":2,"iterations":4,"steps":[
          {"fully_shard":{"module":"u1","mesh_dim":"dp","strategy":"SHARD_GRAD_OP"}},
          {"replicate":{"module":"","mesh_dim":"dp","find_unused_parameters":true}}]})"},
  };
  for (const auto& [model_spec, text] : cases) {
    SCOPED_TRACE(model_spec);
    const Model model = load_model(model_spec);
    const Plan plan = plan_from_json(text);
    const PlanResult r = plan_training(model, plan, {0, 0});
    check_managers(model, r);
    check_ddp_layouts(model, plan, r);
    check_fsdp_units(model, plan, r);
    check_ranks(model, plan, r);
  }
}
