// The planner against the test vectors of pytorch-semantics.md §10 (vectors 5-9, 12-17, 19-21;
// 1-4 and 10 are bucketing_test.cpp's, 18 is mesh_test.cpp's). Each test names its vector.
#include <gtest/gtest.h>

#include <regex>

#include "planner_test_support.hpp"

using namespace stratsim::core;
using namespace stratsim::test;

namespace {

using VV = std::vector<std::vector<int>>;
using V64 = std::vector<std::int64_t>;
using Names = std::vector<std::string>;

const int kForward = phase_of(Phase::forward);
const int kBackward = phase_of(Phase::backward);
const int kInit = phase_of(Phase::init);

// 4 x Linear(2000, 2000), fp32: weight 16,000,000 B, bias 8,000 B.
constexpr std::int64_t kLayer = 16008000;

std::string ddp_plan(int world, const std::string& replicate_args, const std::string& version = "2.4",
                     int iterations = 3) {
  return "{\"world_size\":" + std::to_string(world) + ",\"torch_version\":\"" + version +
         "\",\"iterations\":" + std::to_string(iterations) + ",\"steps\":[{\"replicate\":{\"module\":\"\"" +
         (replicate_args.empty() ? "" : "," + replicate_args) + "}}]}";
}

// The DDP bucket all-reduces of one iteration, in launch order.
V64 bucket_allreduces(const PlanResult& r, int it) {
  return bytes_of(select(iteration(r, it), op("c10d.allreduce_", kBackward, "ddp bucket")));
}
// The rebuild broadcasts (sync_bucket_indices) of one iteration.
V64 rebuild_broadcasts(const PlanResult& r, int it) {
  return bytes_of(select(iteration(r, it), op("c10d.broadcast_", kForward, "ddp rebuild")));
}

// seq_model() (vector 15) is planner_test_support.hpp's; a single Linear(10,10) (14, 16, 17).
Model linear_model() {
  return model_from_json(
      {{"name", "Linear"}, {"modules", {{{"name", "0"}, {"type", "Linear"}, {"in_features", 10}, {"out_features", 10}}}}});
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Vector 5: DDP over 4 x Linear(2000, 2000), default caps.

TEST(PlannerVector05, DefaultCapsOneBucketThenThreeRebuilt) {
  const PlanResult r = run_plan("zoo:Net", ddp_plan(2, ""));
  ASSERT_EQ(r.ddp.size(), 1u) << describe(r);
  const DdpReport& ddp = r.ddp[0];
  EXPECT_EQ(ddp.params, (Names{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias",
                               "fc4.weight", "fc4.bias"}));
  EXPECT_EQ(ddp.group_size, 2);
  EXPECT_EQ(bucket_indices(ddp.initial), (VV{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(bucket_bytes(ddp.initial), (V64{64032000}));
  EXPECT_EQ(bucket_limits(ddp.initial), (V64{kUnlimitedBucketBytes}));
  EXPECT_EQ(bucket_indices(ddp.rebuilt), (VV{{7, 6}, {5, 4, 3, 2}, {1, 0}}));
  EXPECT_EQ(bucket_bytes(ddp.rebuilt), (V64{kLayer, 2 * kLayer, kLayer}));
  EXPECT_EQ(bucket_limits(ddp.rebuilt), (V64{kMiB, 25 * kMiB, 25 * kMiB}));
  ASSERT_EQ(ddp.rebuilt.size(), 3u);
  EXPECT_EQ(ddp.rebuilt[0].params, (Names{"fc4.bias", "fc4.weight"}));
  EXPECT_EQ(ddp.rebuilt[2].params, (Names{"fc1.bias", "fc1.weight"}));
  EXPECT_EQ(ddp.rebuilt_at_iteration, 2);

  EXPECT_EQ(bucket_allreduces(r, 1), (V64{64032000})) << describe(r);
  EXPECT_TRUE(rebuild_broadcasts(r, 1).empty());
  EXPECT_EQ(rebuild_broadcasts(r, 2), (V64{36, 12})) << describe(r);
  EXPECT_EQ(bucket_allreduces(r, 2), (V64{kLayer, 2 * kLayer, kLayer}));
  EXPECT_TRUE(rebuild_broadcasts(r, 3).empty());
  EXPECT_EQ(bucket_allreduces(r, 3), (V64{kLayer, 2 * kLayer, kLayer}));
  EXPECT_EQ(r.counts(), (std::map<std::string, int>{{"c10d.allreduce_", 3}}));
  for (const IterationRecord& it : r.iterations)
    for (const CollectiveRecord& c : it.collectives) {
      EXPECT_EQ(c.group, "world");
      if (c.op == "c10d.allreduce_") {
        EXPECT_EQ(c.dtype, DType::float32);
      }
    }
  // Construction-time collectives only in the first (lazy-init) forward.
  EXPECT_FALSE(select(iteration(r, 1), op("", kInit)).empty());
  EXPECT_TRUE(select(iteration(r, 2), op("", kInit)).empty());
}

// Vector 6: bucket_cap_mb=1 -> four rebuilt buckets (first cap 1 MiB in both versions).
TEST(PlannerVector06, CapOneMiBGivesFourBuckets) {
  for (const char* version : {"2.4", "2.5"}) {
    SCOPED_TRACE(version);
    const PlanResult r = run_plan("zoo:Net", ddp_plan(2, "\"bucket_cap_mb\":1", version));
    const DdpReport& ddp = r.ddp.at(0);
    EXPECT_EQ(bucket_indices(ddp.initial), (VV{{0, 1, 2, 3, 4, 5, 6, 7}}));
    EXPECT_EQ(bucket_indices(ddp.rebuilt), (VV{{7, 6}, {5, 4}, {3, 2}, {1, 0}}));
    EXPECT_EQ(bucket_bytes(ddp.rebuilt), (V64{kLayer, kLayer, kLayer, kLayer}));
    EXPECT_EQ(bucket_limits(ddp.rebuilt), (V64{kMiB, kMiB, kMiB, kMiB}));
    EXPECT_EQ(bucket_allreduces(r, 1), (V64{64032000}));
    EXPECT_EQ(rebuild_broadcasts(r, 2), (V64{36, 16}));
    EXPECT_EQ(bucket_allreduces(r, 3), (V64{kLayer, kLayer, kLayer, kLayer}));
  }
}

// Vector 7: explicit bucket_cap_mb=25: <= 2.4 as vector 5; 2.5+ (PR #121640) the first bucket
// takes the explicit cap too.
TEST(PlannerVector07, ExplicitCap25DependsOnVersion) {
  {
    const PlanResult r = run_plan("zoo:Net", ddp_plan(2, "\"bucket_cap_mb\":25", "2.4"));
    const DdpReport& ddp = r.ddp.at(0);
    EXPECT_EQ(bucket_indices(ddp.rebuilt), (VV{{7, 6}, {5, 4, 3, 2}, {1, 0}}));
    EXPECT_EQ(bucket_limits(ddp.rebuilt), (V64{kMiB, 25 * kMiB, 25 * kMiB}));
    EXPECT_EQ(bucket_allreduces(r, 3), (V64{kLayer, 2 * kLayer, kLayer}));
    EXPECT_EQ(rebuild_broadcasts(r, 2), (V64{36, 12}));
  }
  {
    const PlanResult r = run_plan("zoo:Net", ddp_plan(2, "\"bucket_cap_mb\":25", "2.5"));
    const DdpReport& ddp = r.ddp.at(0);
    EXPECT_EQ(bucket_indices(ddp.initial), (VV{{0, 1, 2, 3, 4, 5, 6, 7}}));
    EXPECT_EQ(bucket_indices(ddp.rebuilt), (VV{{7, 6, 5, 4}, {3, 2, 1, 0}}));
    EXPECT_EQ(bucket_bytes(ddp.rebuilt), (V64{2 * kLayer, 2 * kLayer}));
    EXPECT_EQ(bucket_limits(ddp.rebuilt), (V64{25 * kMiB, 25 * kMiB}));
    EXPECT_EQ(bucket_allreduces(r, 1), (V64{64032000}));
    EXPECT_EQ(rebuild_broadcasts(r, 2), (V64{36, 8}));
    EXPECT_EQ(bucket_allreduces(r, 3), (V64{2 * kLayer, 2 * kLayer}));
  }
  {
    // Newer versions without an explicit cap keep the 1 MiB first bucket.
    const PlanResult r = run_plan("zoo:Net", ddp_plan(2, "", "2.5"));
    EXPECT_EQ(bucket_indices(r.ddp.at(0).rebuilt), (VV{{7, 6}, {5, 4, 3, 2}, {1, 0}}));
  }
}

// Vector 8: find_unused_parameters=True: fixed construction-time buckets over registration order,
// never rebuilt, plus the local_used_map all-reduce (8 int32) every iteration.
TEST(PlannerVector08, FindUnusedParametersFixedBuckets) {
  const PlanResult r = run_plan("zoo:Net", ddp_plan(2, "\"find_unused_parameters\":true"));
  const DdpReport& ddp = r.ddp.at(0);
  EXPECT_EQ(bucket_indices(ddp.initial), (VV{{5, 6, 7}, {1, 2, 3, 4}, {0}}));
  EXPECT_EQ(bucket_bytes(ddp.initial), (V64{16016000, 32016000, 16000000}));
  EXPECT_EQ(bucket_limits(ddp.initial), (V64{25 * kMiB, 25 * kMiB, kMiB}));
  EXPECT_TRUE(ddp.rebuilt.empty());
  EXPECT_EQ(ddp.rebuilt_at_iteration, 0);
  for (int it = 1; it <= 3; ++it) {
    SCOPED_TRACE(it);
    EXPECT_EQ(bucket_allreduces(r, it), (V64{16016000, 32016000, 16000000})) << describe(r);
    const auto used = select(iteration(r, it), op("c10d.allreduce_", kBackward, "local_used_map"));
    ASSERT_EQ(used.size(), 1u);
    EXPECT_EQ(used[0].bytes, 32);
    EXPECT_EQ(used[0].dtype, DType::int32);
    EXPECT_TRUE(select(iteration(r, it), op("c10d.broadcast_", kForward)).empty());
  }
  // 2.5+ with an explicit cap: construction-time limits are just [cap].
  const PlanResult newer =
      run_plan("zoo:Net", ddp_plan(2, "\"find_unused_parameters\":true,\"bucket_cap_mb\":25", "2.5"));
  EXPECT_EQ(bucket_indices(newer.ddp.at(0).initial), (VV{{7}, {3, 4, 5, 6}, {0, 1, 2}}));
}

// Vector 9 (test_replicate.py test_replicate_with_kwargs): 3 x Linear(2, 2), bucket_cap_mb=1.
TEST(PlannerVector09, ReplicateNetSingleBucket) {
  for (const char* version : {"2.4", "2.5"}) {
    SCOPED_TRACE(version);
    const PlanResult r = run_plan("zoo:ReplicateNet", ddp_plan(2, "\"bucket_cap_mb\":1", version));
    const DdpReport& ddp = r.ddp.at(0);
    EXPECT_EQ(bucket_indices(ddp.initial), (VV{{0, 1, 2, 3, 4, 5}}));
    EXPECT_EQ(bucket_bytes(ddp.initial), (V64{72}));
    EXPECT_EQ(bucket_indices(ddp.rebuilt), (VV{{5, 4, 3, 2, 1, 0}}));
    EXPECT_EQ(bucket_bytes(ddp.rebuilt), (V64{72}));
    for (int it = 1; it <= 3; ++it) EXPECT_EQ(bucket_allreduces(r, it), (V64{72})) << it;
  }
}

// Same model, default cap: the rebuild's limits are [1 MiB, 25 MiB]; 72 B never close a bucket, so
// the single rebuilt bucket is the first bucket and records the first-bucket limit, 1 MiB.
TEST(PlannerVector09, ReplicateNetDefaultCapRebuiltLimitIsTheFirstBucketCap) {
  const PlanResult r = run_plan("zoo:ReplicateNet", ddp_plan(2, "", "2.4"));
  const DdpReport& ddp = r.ddp.at(0);
  EXPECT_EQ(bucket_indices(ddp.rebuilt), (VV{{5, 4, 3, 2, 1, 0}}));
  EXPECT_EQ(bucket_limits(ddp.rebuilt), (V64{kMiB}));
}

// ---------------------------------------------------------------------------------------------
// Vector 12: test_fsdp_tp_extension_grad (TestModel; TP on "tp", FSDP root unit on "dp").

namespace {
std::string fsdp_tp_plan(int world) {
  return "{\"world_size\":" + std::to_string(world) + ",\"mesh\":{\"shape\":[" + std::to_string(world / 2) +
         ",2],\"dim_names\":[\"dp\",\"tp\"]},\"batch_size\":2,\"iterations\":2,\"steps\":["
         "{\"parallelize_module\":{\"module\":\"\",\"mesh_dim\":\"tp\",\"plan\":{"
         "\"mlp.net1\":{\"style\":\"colwise\",\"input_layouts\":\"Shard(0)\"},"
         "\"mlp.net2\":{\"style\":\"rowwise\",\"output_layouts\":\"Shard(0)\"}}}},"
         "{\"distribute_module\":{\"module\":\"mlp_norm\",\"mesh_dim\":\"tp\",\"input_layouts\":\"Shard(0)\"}},"
         "{\"fully_shard\":{\"module\":\"\",\"mesh_dim\":\"dp\"}}]}";
}

void expect_fsdp_tp_iteration(const IterationRecord& it) {
  EXPECT_EQ(counts_of(it), (std::map<std::string, int>{{"c10d_functional.reduce_scatter_tensor", 2},
                                                        {"c10d_functional.all_gather_into_tensor", 2},
                                                        {"c10d_functional.all_reduce", 1},
                                                        {"c10d._allgather_base_", 1},
                                                        {"c10d._reduce_scatter_base_", 1}}))
      << describe(it);
  EXPECT_EQ(it.collectives.size(), 7u);
  // FSDP flat parameter: 752 B gathered / reduce-scattered on dp; TP activations [4,10] = 160 B,
  // the RMSNorm weight's Partial gradient 40 B, all on tp.
  for (const CollectiveRecord& c : it.collectives) {
    if (c.op == "c10d._allgather_base_" || c.op == "c10d._reduce_scatter_base_") {
      EXPECT_EQ(c.group, "dp");
      EXPECT_EQ(c.bytes, 752);
    } else {
      EXPECT_EQ(c.group, "tp");
      EXPECT_EQ(c.bytes, c.op == "c10d_functional.all_reduce" ? 40 : 160) << describe(c);
    }
  }
  // Forward: FSDP AG, net1 input AG, net2 output RS. Backward: net2 grad AG, net1 grad RS,
  // mlp_norm weight AR, FSDP RS (the root is not resharded: no backward FSDP all-gather).
  EXPECT_EQ(select(it, op("c10d._allgather_base_", kForward)).size(), 1u);
  EXPECT_EQ(select(it, op("c10d._allgather_base_", kBackward)).size(), 0u);
  EXPECT_EQ(select(it, op("c10d_functional.all_gather_into_tensor", kForward)).size(), 1u);
  EXPECT_EQ(select(it, op("c10d_functional.reduce_scatter_tensor", kForward)).size(), 1u);
  EXPECT_EQ(select(it, op("c10d_functional.all_gather_into_tensor", kBackward)).size(), 1u);
  EXPECT_EQ(select(it, op("c10d_functional.reduce_scatter_tensor", kBackward)).size(), 1u);
  EXPECT_EQ(select(it, op("c10d_functional.all_reduce", kBackward)).size(), 1u);
  EXPECT_EQ(select(it, op("c10d._reduce_scatter_base_", kBackward)).size(), 1u);
}
}  // namespace

TEST(PlannerVector12, FsdpTpExtensionGradW4) {
  const PlanResult r = run_plan("zoo:TestModel", fsdp_tp_plan(4));
  ASSERT_EQ(r.fsdp.size(), 1u);
  EXPECT_TRUE(r.fsdp[0].root);
  EXPECT_EQ(r.fsdp[0].numel, 188);
  EXPECT_EQ(r.fsdp[0].shard_numel, 94);
  EXPECT_EQ(r.fsdp[0].padded_numel, 188);
  EXPECT_EQ(r.fsdp[0].group, "dp");
  EXPECT_EQ(r.fsdp[0].params, (Names{"mlp.net1.weight", "mlp.net1.bias", "mlp.net2.weight", "mlp.net2.bias",
                                     "mlp_norm.weight"}));
  for (const IterationRecord& it : r.iterations) expect_fsdp_tp_iteration(it);
  EXPECT_EQ(r.counts().size(), 5u);
}

TEST(PlannerVector12, FsdpTpExtensionGradW8) {
  // dp = 4: S = 47. Rank 5 sits at (2, 1): tp group [4, 5], dp group [1, 3, 5, 7].
  const PlanResult r = run_plan("zoo:TestModel", fsdp_tp_plan(8), 5);
  ASSERT_EQ(r.fsdp.size(), 1u);
  EXPECT_EQ(r.fsdp[0].numel, 188);
  EXPECT_EQ(r.fsdp[0].shard_numel, 47);
  EXPECT_EQ(r.coordinate, (std::vector<int>{2, 1}));
  for (const IterationRecord& it : r.iterations) {
    expect_fsdp_tp_iteration(it);
    for (const CollectiveRecord& c : it.collectives) {
      const auto& ranks = r.group_ranks.at(static_cast<std::size_t>(c.group_id));
      if (c.group == "tp") {
        EXPECT_EQ(ranks, (std::vector<int>{4, 5}));
      } else {
        EXPECT_EQ(ranks, (std::vector<int>{1, 3, 5, 7}));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Vector 13 (+21): DDP + TP on Net (test_replicate_with_compiler.py DDP_TP_Test), eager semantics.

namespace {
std::string ddp_tp_plan(int world, int tp) {
  return "{\"world_size\":" + std::to_string(world) + ",\"mesh\":{\"shape\":[" + std::to_string(world / tp) + "," +
         std::to_string(tp) +
         "],\"dim_names\":[\"dp\",\"tp\"]},\"iterations\":3,\"steps\":["
         "{\"parallelize_module\":{\"module\":\"\",\"mesh_dim\":\"tp\",\"plan\":{\"fc1\":\"colwise\",\"fc2\":"
         "\"rowwise\",\"fc3\":\"colwise\",\"fc4\":\"rowwise\"}}},"
         "{\"replicate\":{\"module\":\"\",\"mesh_dim\":\"dp\"}}]}";
}

void expect_tp_allreduces(const IterationRecord& it) {
  const auto tp = select(it, op("c10d_functional.all_reduce"));
  EXPECT_EQ(bytes_of(tp), (V64{8000, 8000, 8000})) << describe(it);
  EXPECT_EQ(select(it, op("c10d_functional.all_reduce", kForward)).size(), 2u);
  EXPECT_EQ(select(it, op("c10d_functional.all_reduce", kBackward)).size(), 1u);
  for (const auto& c : tp) EXPECT_EQ(c.group, "tp");
}
}  // namespace

TEST(PlannerVector13, DdpTpTp2) {
  const PlanResult r = run_plan("zoo:Net", ddp_tp_plan(4, 2));
  const DdpReport& ddp = r.ddp.at(0);
  EXPECT_EQ(ddp.group, "dp");
  EXPECT_EQ(ddp.group_size, 2);
  EXPECT_EQ(bucket_bytes(ddp.initial), (V64{32024000}));
  EXPECT_EQ(bucket_indices(ddp.rebuilt), (VV{{7, 6}, {5, 4, 3, 2, 1, 0}}));
  EXPECT_EQ(bucket_bytes(ddp.rebuilt), (V64{8008000, 24016000}));
  for (const IterationRecord& it : r.iterations) expect_tp_allreduces(it);
  EXPECT_EQ(bucket_allreduces(r, 1), (V64{32024000}));
  EXPECT_EQ(bucket_allreduces(r, 2), (V64{8008000, 24016000}));
  EXPECT_EQ(bucket_allreduces(r, 3), (V64{8008000, 24016000}));
  for (const auto& c : select(iteration(r, 3), op("c10d.allreduce_"))) EXPECT_EQ(c.group, "dp");
  // Vector 21: the rebuild broadcasts 9 int32 (indices + count) and 2 int32 (bucket sizes) on dp.
  const auto broadcasts = select(iteration(r, 2), op("c10d.broadcast_", kForward, "ddp rebuild"));
  EXPECT_EQ(bytes_of(broadcasts), (V64{36, 8}));
  for (const auto& c : broadcasts) {
    EXPECT_EQ(c.group, "dp");
    EXPECT_EQ(c.dtype, DType::int32);
  }
}

TEST(PlannerVector13, DdpTpTp4) {
  const PlanResult r = run_plan("zoo:Net", ddp_tp_plan(8, 4));
  const DdpReport& ddp = r.ddp.at(0);
  EXPECT_EQ(bucket_bytes(ddp.initial), (V64{16020000}));
  EXPECT_EQ(bucket_bytes(ddp.rebuilt), (V64{4008000, 12012000}));
  for (const IterationRecord& it : r.iterations) expect_tp_allreduces(it);
  EXPECT_EQ(bucket_allreduces(r, 1), (V64{16020000}));
  EXPECT_EQ(bucket_allreduces(r, 3), (V64{4008000, 12012000}));
}

// ---------------------------------------------------------------------------------------------
// Vectors 14-17: FSDP1 flat parameters, W = 4 (8 for HSDP).

TEST(PlannerVector14, FullShardSingleLinear) {
  const PlanResult r = run_plan(linear_model(), R"({"world_size":4,"iterations":2,"steps":[{"fully_shard":{"module":""}}]})");
  ASSERT_EQ(r.fsdp.size(), 1u);
  const FsdpUnitReport& unit = r.fsdp[0];
  EXPECT_TRUE(unit.root);
  EXPECT_EQ(unit.numel, 110);
  EXPECT_EQ(unit.shard_numel, 28);
  EXPECT_EQ(unit.padded_numel, 112);
  for (const IterationRecord& it : r.iterations) {
    const auto ag = select(it, op("c10d._allgather_base_"));
    const auto rs = select(it, op("c10d._reduce_scatter_base_"));
    ASSERT_EQ(ag.size(), 1u) << describe(it);
    ASSERT_EQ(rs.size(), 1u);
    EXPECT_EQ(ag[0].phase, Phase::forward);  // the root is not resharded: no backward all-gather
    EXPECT_EQ(ag[0].bytes, 448);
    EXPECT_EQ(ag[0].input_bytes, 112);
    EXPECT_EQ(ag[0].output_bytes, 448);
    EXPECT_EQ(rs[0].bytes, 448);
    EXPECT_EQ(rs[0].input_bytes, 448);
    EXPECT_EQ(rs[0].output_bytes, 112);
    EXPECT_EQ(it.collectives.size(), 2u);
  }
}

// A parameter the forward never reads does not hold its unit's reduce-scatter back: FSDP1's
// post-backward hook sits on the FlatParameter's AccumulateGrad, which the used views reach.
TEST(PlannerVector14, UnusedParameterStillReducesItsUnit) {
  const Model model =
      model_from_json({{"name", "M"},
                       {"modules",
                        {{{"name", "a"}, {"type", "Linear"}, {"in_features", 10}, {"out_features", 10}},
                         {{"name", "b"}, {"type", "Linear"}, {"in_features", 10}, {"out_features", 10}}}},
                       {"forward", {"a"}}});
  const PlanResult r = run_plan(model, R"({"world_size":4,"iterations":2,"steps":[{"fully_shard":{"module":""}}]})");
  ASSERT_EQ(r.fsdp.size(), 1u);
  EXPECT_EQ(r.fsdp[0].numel, 220);  // b's parameters are flattened too
  for (const IterationRecord& it : r.iterations) {
    EXPECT_EQ(select(it, op("c10d._allgather_base_")).size(), 1u) << describe(it);
    ASSERT_EQ(select(it, op("c10d._reduce_scatter_base_")).size(), 1u) << describe(it);
  }
}

namespace {
std::string seq_fsdp_plan(const std::string& strategy, int iterations = 2, int accumulation = 1) {
  return "{\"world_size\":4,\"iterations\":" + std::to_string(iterations) +
         ",\"gradient_accumulation_steps\":" + std::to_string(accumulation) +
         ",\"steps\":[{\"fully_shard\":{\"module\":\"\",\"strategy\":\"" + strategy +
         "\",\"policy\":{\"module_types\":[\"Linear\"]}}}]}";
}
}  // namespace

TEST(PlannerVector15, WrapPolicyUnitsAndStrategies) {
  const Model model = seq_model();
  {
    const PlanResult r = run_plan(model, seq_fsdp_plan("FULL_SHARD"));
    ASSERT_EQ(r.fsdp.size(), 3u);
    const FsdpUnitReport* root = find_unit(r, "");
    ASSERT_NE(root, nullptr);
    EXPECT_TRUE(root->root);
    EXPECT_TRUE(root->params.empty());  // everything went to the Linear units: no handle
    for (const char* name : {"0", "2"}) {
      const FsdpUnitReport* unit = find_unit(r, name);
      ASSERT_NE(unit, nullptr) << name;
      EXPECT_FALSE(unit->root);
      EXPECT_EQ(unit->numel, 110);
      EXPECT_EQ(unit->shard_numel, 28);
    }
    for (const IterationRecord& it : r.iterations) {
      EXPECT_EQ(counts_of(it), (std::map<std::string, int>{{"c10d._allgather_base_", 4}, {"c10d._reduce_scatter_base_", 2}}))
          << describe(it);
      EXPECT_EQ(select(it, op("c10d._allgather_base_", kForward)).size(), 2u);
      EXPECT_EQ(select(it, op("c10d._allgather_base_", kBackward)).size(), 2u);
    }
  }
  {
    const PlanResult r = run_plan(model, seq_fsdp_plan("SHARD_GRAD_OP"));
    for (const IterationRecord& it : r.iterations) {
      EXPECT_EQ(counts_of(it), (std::map<std::string, int>{{"c10d._allgather_base_", 2}, {"c10d._reduce_scatter_base_", 2}}))
          << describe(it);
      EXPECT_EQ(select(it, op("c10d._allgather_base_", kBackward)).size(), 0u);
    }
  }
  {
    const PlanResult r = run_plan(model, seq_fsdp_plan("NO_SHARD"));
    for (const IterationRecord& it : r.iterations) {
      EXPECT_EQ(counts_of(it), (std::map<std::string, int>{{"c10d.allreduce_", 2}})) << describe(it);
      EXPECT_EQ(bytes_of(select(it, op("c10d.allreduce_"))), (V64{440, 440}));
    }
  }
}

TEST(PlannerVector15, NoSyncIteration) {
  const Model model = seq_model();
  {
    // gradient_accumulation_steps=2: iteration 1 runs under no_sync.
    const PlanResult r = run_plan(model, seq_fsdp_plan("FULL_SHARD", 2, 2));
    EXPECT_FALSE(iteration(r, 1).sync);
    EXPECT_EQ(counts_of(iteration(r, 1)), (std::map<std::string, int>{{"c10d._allgather_base_", 4}}))
        << describe(r);
    EXPECT_TRUE(iteration(r, 2).sync);
    EXPECT_EQ(counts_of(iteration(r, 2)),
              (std::map<std::string, int>{{"c10d._allgather_base_", 4}, {"c10d._reduce_scatter_base_", 2}}));
  }
  {
    // SHARD_GRAD_OP keeps the parameters unsharded through no_sync: the synced step gathers nothing.
    const PlanResult r = run_plan(model, seq_fsdp_plan("SHARD_GRAD_OP", 4, 2));
    EXPECT_EQ(counts_of(iteration(r, 1)), (std::map<std::string, int>{{"c10d._allgather_base_", 2}})) << describe(r);
    EXPECT_EQ(counts_of(iteration(r, 2)), (std::map<std::string, int>{{"c10d._reduce_scatter_base_", 2}}));
    EXPECT_EQ(counts_of(iteration(r, 3)), (std::map<std::string, int>{{"c10d._allgather_base_", 2}}));
  }
  {
    const PlanResult r = run_plan(model, seq_fsdp_plan("NO_SHARD", 2, 2));
    EXPECT_TRUE(iteration(r, 1).collectives.empty()) << describe(r);
    EXPECT_EQ(counts_of(iteration(r, 2)), (std::map<std::string, int>{{"c10d.allreduce_", 2}}));
  }
}

TEST(PlannerVector16, MixedPrecisionAndOrigParams) {
  const Model model = linear_model();
  auto plan = [](const std::string& args) {
    return "{\"world_size\":4,\"iterations\":1,\"steps\":[{\"fully_shard\":{\"module\":\"\"" + args + "}}]}";
  };
  {
    const PlanResult r = run_plan(model, plan(",\"mixed_precision\":{\"param_dtype\":\"bf16\"}"));
    const auto ag = select(iteration(r, 1), op("c10d._allgather_base_"));
    const auto rs = select(iteration(r, 1), op("c10d._reduce_scatter_base_"));
    ASSERT_EQ(ag.size(), 1u);
    ASSERT_EQ(rs.size(), 1u);
    EXPECT_EQ(ag[0].bytes, 224);
    EXPECT_EQ(ag[0].dtype, DType::bfloat16);
    EXPECT_EQ(rs[0].bytes, 224);  // reduce dtype defaults to the param dtype
    EXPECT_EQ(rs[0].dtype, DType::bfloat16);
  }
  {
    const PlanResult r = run_plan(model, plan(",\"mixed_precision\":{\"param_dtype\":\"bf16\",\"reduce_dtype\":\"fp32\"}"));
    EXPECT_EQ(bytes_of(select(iteration(r, 1), op("c10d._allgather_base_"))), (V64{224}));
    const auto rs = select(iteration(r, 1), op("c10d._reduce_scatter_base_"));
    ASSERT_EQ(rs.size(), 1u);
    EXPECT_EQ(rs[0].bytes, 448);
    EXPECT_EQ(rs[0].output_bytes, 112);
    EXPECT_EQ(rs[0].dtype, DType::float32);
  }
  {
    // use_orig_params, fp32: aligned to 4 elements; 100 + 10 + 2 (world padding) = 112, S = 28.
    const PlanResult r = run_plan(model, plan(",\"use_orig_params\":true"));
    EXPECT_EQ(r.fsdp.at(0).numel, 112);
    EXPECT_EQ(r.fsdp.at(0).shard_numel, 28);
    EXPECT_EQ(bytes_of(select(iteration(r, 1), op("c10d._allgather_base_"))), (V64{448}));
  }
  {
    // use_orig_params, bf16 compute: aligned to 8; 100 + 4 + 10 + 2 = 116, S = 29, AG 232 B.
    const PlanResult r =
        run_plan(model, plan(",\"use_orig_params\":true,\"mixed_precision\":{\"param_dtype\":\"bf16\"}"));
    EXPECT_EQ(r.fsdp.at(0).numel, 116);
    EXPECT_EQ(r.fsdp.at(0).shard_numel, 29);
    EXPECT_EQ(bytes_of(select(iteration(r, 1), op("c10d._allgather_base_"))), (V64{232}));
  }
}

TEST(PlannerVector17, HybridShardTwoNodesOfFour) {
  const std::string text =
      R"({"world_size":8,"mesh":{"shape":[2,4],"dim_names":["rep","shard"]},"iterations":2,
          "steps":[{"fully_shard":{"module":"","strategy":"HYBRID_SHARD","mesh_dim":["rep","shard"]}}]})";
  const Model model = linear_model();
  for (int rank = 0; rank < 8; ++rank) {
    SCOPED_TRACE(rank);
    const PlanResult r = run_plan(model, text, rank);
    ASSERT_EQ(r.fsdp.size(), 1u);
    EXPECT_EQ(r.fsdp[0].group, "shard");
    EXPECT_EQ(r.fsdp[0].replicate_group, "rep");
    EXPECT_EQ(r.fsdp[0].shard_numel, 28);
    const int node = rank / 4, local = rank % 4;
    const std::vector<int> intra{4 * node, 4 * node + 1, 4 * node + 2, 4 * node + 3};
    const std::vector<int> inter{local, local + 4};
    for (const IterationRecord& it : r.iterations) {
      const auto ag = select(it, op("c10d._allgather_base_"));
      const auto rs = select(it, op("c10d._reduce_scatter_base_"));
      const auto ar = select(it, op("c10d.allreduce_"));
      ASSERT_EQ(ag.size(), 1u) << describe(it);
      ASSERT_EQ(rs.size(), 1u);
      ASSERT_EQ(ar.size(), 1u);
      EXPECT_EQ(it.collectives.size(), 3u);
      EXPECT_EQ(ag[0].bytes, 448);
      EXPECT_EQ(rs[0].bytes, 448);
      EXPECT_EQ(ar[0].bytes, 112);  // the sharded gradient
      EXPECT_EQ(r.group_ranks.at(static_cast<std::size_t>(ag[0].group_id)), intra);
      EXPECT_EQ(r.group_ranks.at(static_cast<std::size_t>(rs[0].group_id)), intra);
      EXPECT_EQ(r.group_ranks.at(static_cast<std::size_t>(ar[0].group_id)), inter);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Vector 19: replicate() validation.

TEST(PlannerVector19, DeviceIdMustBeIntOrDevice) {
  const std::string message = plan_error([] {
    run_plan("zoo:ReplicateNet", R"({"world_size":2,"steps":[{"replicate":{"module":"","device_id":["cpu"]}}]})");
  });
  EXPECT_NE(message.find("Expected device_id to be int or torch.device"), std::string::npos) << message;
  // int and torch.device values are accepted.
  for (const char* id : {"0", "\"cpu\"", "\"cuda:0\""})
    EXPECT_EQ(plan_error([&] {
                run_plan("zoo:ReplicateNet", std::string(R"({"world_size":2,"steps":[{"replicate":{"module":"","device_id":)") +
                                                 id + "}}]}");
              }),
              "")
        << id;
}

TEST(PlannerVector19, ReplicateOnFullyShardedModuleFails) {
  const std::string message = plan_error([] {
    run_plan("zoo:CompositeModel",
             R"({"world_size":2,"steps":[{"fully_shard":{"module":"l1"}},{"replicate":{"module":"l1"}}]})");
  });
  EXPECT_TRUE(std::regex_search(message, std::regex("Cannot apply .*replicate"))) << message;
  EXPECT_NE(message.find("Cannot apply `replicate()` on a Module already managed by `fully_shard`"), std::string::npos);
  // A sibling is fine (test_composable_fsdp_replicate).
  EXPECT_EQ(plan_error([] {
              run_plan("zoo:CompositeModel",
                       R"({"world_size":2,"steps":[{"fully_shard":{"module":"l1"}},{"replicate":{"module":"l2"}}]})");
            }),
            "");
}

TEST(PlannerVector19, ReplicateParamNamesSkipFullyShardedSubtrees) {
  for (const char* policy : {"", R"(,"policy":{"module_types":["Linear"]})"}) {
    SCOPED_TRACE(policy);
    const std::string text = std::string(R"({"world_size":2,"iterations":2,"steps":[{"fully_shard":{"module":"u1")") +
                             policy + R"(}},{"fully_shard":{"module":"u2")" + policy +
                             R"(}},{"replicate":{"module":""}}]})";
    const PlanResult r = run_plan("zoo:CompositeParamModel", text);
    ASSERT_EQ(r.ddp.size(), 1u);
    EXPECT_EQ(r.ddp[0].params, (Names{"p", "l.weight", "l.bias"}));
    EXPECT_EQ(bucket_bytes(r.ddp[0].initial), (V64{80400}));
  }
}

// ---------------------------------------------------------------------------------------------
// Vector 20: fp16/bf16 compression hooks move 2 bytes per element with vector 5's buckets.

TEST(PlannerVector20, CompressHooksHalveTheBytes) {
  for (const auto& [hook, dtype] : {std::pair{"fp16_compress_hook", DType::float16}, std::pair{"bf16_compress_hook", DType::bfloat16}}) {
    SCOPED_TRACE(hook);
    const PlanResult r = run_plan("zoo:Net", ddp_plan(2, std::string("\"comm_hook\":\"") + hook + "\""));
    EXPECT_EQ(bucket_indices(r.ddp.at(0).rebuilt), (VV{{7, 6}, {5, 4, 3, 2}, {1, 0}}));
    EXPECT_EQ(bucket_allreduces(r, 1), (V64{32016000}));
    EXPECT_EQ(bucket_allreduces(r, 2), (V64{8004000, 16008000, 8004000}));
    EXPECT_EQ(bucket_allreduces(r, 3), (V64{8004000, 16008000, 8004000}));
    for (const auto& c : select(iteration(r, 3), op("c10d.allreduce_"))) EXPECT_EQ(c.dtype, dtype);
    // The buckets themselves stay fp32 gradient buffers.
    EXPECT_EQ(bucket_bytes(r.ddp.at(0).rebuilt), (V64{kLayer, 2 * kLayer, kLayer}));
  }
}

// Vector 21: the iteration-2 rebuild broadcasts of plain DDP (the DDP+TP case is in 13).
TEST(PlannerVector21, RebuildBroadcastsOnce) {
  const PlanResult r = run_plan("zoo:Net", ddp_plan(2, "", "2.4", 4));
  EXPECT_EQ(rebuild_broadcasts(r, 2), (V64{36, 12}));
  for (const auto& c : select(iteration(r, 2), op("c10d.broadcast_", kForward, "ddp rebuild")))
    EXPECT_EQ(c.dtype, DType::int32);
  for (int it : {1, 3, 4}) EXPECT_TRUE(select(iteration(r, it), op("c10d.broadcast_", kForward)).empty()) << it;
}

// ---------------------------------------------------------------------------------------------
// §1.4 rules around the vectors: static_graph delays the first reduction and rebuilds one
// iteration later; no_sync iterations neither reduce nor record the ready order.

TEST(PlannerDdpRules, StaticGraphDelaysReductionAndRebuild) {
  const PlanResult r = run_plan("zoo:Net", ddp_plan(2, "\"static_graph\":true"));
  const auto it1 = select(iteration(r, 1), op("c10d.allreduce_", kBackward));
  ASSERT_EQ(it1.size(), 2u) << describe(r);
  EXPECT_NE(it1[0].reason.find("local_used_map"), std::string::npos);  // delay_all_reduce: used map first
  EXPECT_EQ(it1[0].bytes, 32);
  EXPECT_EQ(it1[1].bytes, 64032000);
  EXPECT_EQ(bucket_allreduces(r, 2), (V64{64032000}));
  EXPECT_TRUE(select(iteration(r, 2), op("c10d.allreduce_", kBackward, "local_used_map")).empty());
  EXPECT_TRUE(rebuild_broadcasts(r, 2).empty());
  EXPECT_EQ(rebuild_broadcasts(r, 3), (V64{36, 12}));
  EXPECT_EQ(bucket_allreduces(r, 3), (V64{kLayer, 2 * kLayer, kLayer}));
  EXPECT_EQ(r.ddp.at(0).rebuilt_at_iteration, 3);
}

TEST(PlannerDdpRules, NoSyncDefersReductionAndRebuild) {
  const std::string text =
      R"({"world_size":2,"iterations":4,"gradient_accumulation_steps":2,"steps":[{"replicate":{"module":""}}]})";
  const PlanResult r = run_plan("zoo:Net", text);
  EXPECT_TRUE(bucket_allreduces(r, 1).empty()) << describe(r);
  EXPECT_EQ(bucket_allreduces(r, 2), (V64{64032000}));
  // The rebuild runs in the forward after the first synced backward, even under no_sync.
  EXPECT_FALSE(iteration(r, 3).sync);
  EXPECT_EQ(rebuild_broadcasts(r, 3), (V64{36, 12}));
  EXPECT_TRUE(bucket_allreduces(r, 3).empty());
  EXPECT_EQ(bucket_allreduces(r, 4), (V64{kLayer, 2 * kLayer, kLayer}));
  EXPECT_EQ(r.ddp.at(0).rebuilt_at_iteration, 3);
}
