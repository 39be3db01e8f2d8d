// FSDP2's own kernels (copy-in, copy-out, chunk_cat, the casts and divides around its reductions)
// and clip_grad_norm_: what each moves, where it sits in the program, what waits for it, and the
// all-reduce of the gradient norms. The bytes follow PyTorch's code paths (torch/distributed/fsdp/
// _fully_shard/_fsdp_collectives.py); benchmarks/accuracy/gpu/measured/*.json ("scopes") hold the
// kernels measured on an H100, and tests/data/golden/ the clipping all-reduces PyTorch 2.15 issued.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "planner_test_support.hpp"

using namespace stratsim::core;
using namespace stratsim::test;

namespace {

// Sequential(Linear(10,10), ReLU, Linear(10,10)), fully_shard on "0" then on the root, both with
// `mp` as mp_policy ("" for none), over `world` ranks.
PlanResult fsdp2(int world, const std::string& version, const std::string& mp, const std::string& optimizer = "") {
  const std::string policy = mp.empty() ? "" : ",\"mp_policy\":" + mp;
  return run_plan(seq_model(), "{\"world_size\":" + std::to_string(world) + ",\"torch_version\":\"" + version +
                                   "\",\"iterations\":2" + (optimizer.empty() ? "" : ",\"optimizer\":" + optimizer) +
                                   ",\"steps\":[{\"torch.distributed.fsdp.fully_shard\":{\"module\":\"0\"" + policy +
                                   "}},{\"torch.distributed.fsdp.fully_shard\":{\"module\":\"\"" + policy + "}}]}");
}

const std::string kBf16 = R"({"param_dtype":"bfloat16","reduce_dtype":"float32"})";

// Iteration 2's ops named `prefix` + "...", in program order, as "name bytes class".
std::vector<std::string> kernels(const PlanResult& r, const std::string& prefix) {
  std::vector<std::string> out;
  for (const ProgramOp& op : r.program.ops)
    if (op.iteration == 2 && op.type == OpType::compute && op.name.rfind(prefix, 0) == 0)
      out.push_back(op.name + " " + std::to_string(op.bytes_accessed) + " " + op.op_class);
  return out;
}

const ProgramOp& named(const PlanResult& r, const std::string& name, int iteration = 2) {
  for (const ProgramOp& op : r.program.ops)
    if (op.iteration == iteration && op.name == name) return op;
  ADD_FAILURE() << "no op " << name;
  return r.program.ops.front();
}

bool waits_for(const ProgramOp& op, int id) { return std::find(op.deps.begin(), op.deps.end(), id) != op.deps.end(); }

}  // namespace

// Over 2 ranks each Linear holds 55 of its 110 elements. Copy-in: the float32 shard cast to
// bfloat16 (4 + 2 bytes) and copied into the all-gather input (2 + 2); copy-out: the gathered
// 110 bfloat16 elements split into the parameters (2 + 2); chunk_cat: the bfloat16 gradients into
// the float32 reduce-scatter input (2 + 4; 2.15 upcasts there, or earlier when gradients
// accumulate over micro-steps: 4 + 4).
TEST(Fsdp2Kernels, CopyInCopyOutAndChunkCatAroundEachCollective) {
  const PlanResult r = fsdp2(2, "2.15", kBf16);
  EXPECT_EQ(kernels(r, "fsdp2."),
            (std::vector<std::string>{
                "fsdp2.all_gather_copy_in Sequential 550 elementwise",  // forward: the root first
                "fsdp2.all_gather_copy_out Sequential 440 multi_tensor_copy",
                "fsdp2.all_gather_copy_in 0 550 elementwise", "fsdp2.all_gather_copy_out 0 440 multi_tensor_copy",
                "fsdp2.all_gather_copy_in 0 550 elementwise",  // unit 0's pre-backward re-gather
                "fsdp2.all_gather_copy_out 0 440 multi_tensor_copy",
                "fsdp2.reduce_scatter_copy_in Sequential 660 multi_tensor_copy",  // the final callback, pre-order
                "fsdp2.reduce_scatter_copy_in 0 660 multi_tensor_copy"}));
  for (const ProgramOp& op : r.program.ops) {
    if (op.type != OpType::compute || op.role != OpRole::fsdp2_copy) continue;
    EXPECT_EQ(r.program.streams[op.stream], "compute") << op.name;
  }
  // The all-gather waits for its copy-in, the copy-out for the all-gather, the reduce-scatter for
  // its chunk_cat.
  for (const ProgramOp& op : r.program.ops) {
    if (op.iteration != 2 || op.type != OpType::collective) continue;
    const ProgramOp& before = r.program.ops[op.id - 1];
    if (op.role == OpRole::fsdp_unshard) {
      EXPECT_EQ(before.name.rfind("fsdp2.all_gather_copy_in", 0), 0u) << op.name;
      EXPECT_TRUE(waits_for(op, before.id)) << op.name;
      // The copy-out runs when the group's own hook waits: at once in forward, after the current
      // group's backward for a backward prefetch.
      const auto copy_out = std::find_if(r.program.ops.begin() + op.id, r.program.ops.end(), [&](const ProgramOp& o) {
        return o.name == "fsdp2.all_gather_copy_out " + before.name.substr(before.name.find(' ') + 1);
      });
      ASSERT_NE(copy_out, r.program.ops.end()) << op.name;
      EXPECT_TRUE(waits_for(*copy_out, op.id)) << op.name;
      if (op.reason.find("prefetch") != std::string::npos) {
        EXPECT_GT(copy_out->id, op.id + 1) << op.name;
      }
    }
    if (op.role == OpRole::fsdp_reduce_grad) {
      EXPECT_EQ(op.deps, std::vector<int>{before.id}) << op.name;
    }
  }
  // Gradients accumulated over a micro-step without sync are float32 by the reduction on 2.15
  // (_set_unsharded_grad_dtypes), bfloat16 on 2.14.
  const auto accumulated = [&](const std::string& version) {
    return kernels(run_plan(seq_model(), "{\"world_size\":2,\"torch_version\":\"" + version +
                                             "\",\"iterations\":2,\"gradient_accumulation_steps\":2,\"steps\":["
                                             "{\"torch.distributed.fsdp.fully_shard\":{\"module\":\"\",\"mp_policy\":" +
                                             kBf16 + "}}]}"),
                   "fsdp2.reduce_scatter_copy_in");
  };
  EXPECT_EQ(accumulated("2.15"),
            std::vector<std::string>{"fsdp2.reduce_scatter_copy_in Sequential 1760 multi_tensor_copy"});
  EXPECT_EQ(accumulated("2.14"),
            std::vector<std::string>{"fsdp2.reduce_scatter_copy_in Sequential 1320 multi_tensor_copy"});
  // Without a cast the copy-in is the one copy into the all-gather input, in float32.
  EXPECT_EQ(kernels(fsdp2(2, "2.15", ""), "fsdp2.all_gather_copy_in 0").front(),
            "fsdp2.all_gather_copy_in 0 440 elementwise");
}

// A one-rank shard group neither gathers (2.9+) nor scatters (2.10+): each unshard casts and copies
// the shards (10 bytes per element with a bfloat16 cast), each reduction copies the chunk_cat
// output into the float32 gradient (8 bytes). 2.8 still runs the collectives and their copies.
TEST(Fsdp2Kernels, OneRankGroupsCopyInsteadOfCollectives) {
  EXPECT_EQ(kernels(fsdp2(1, "2.11", kBf16), "fsdp2."),
            (std::vector<std::string>{
                "fsdp2.copy_shards Sequential 1100 elementwise", "fsdp2.copy_shards 0 1100 elementwise",
                "fsdp2.copy_shards 0 1100 elementwise", "fsdp2.reduce_scatter_copy_in Sequential 660 multi_tensor_copy",
                "fsdp2.reduce_copy Sequential 880 elementwise", "fsdp2.reduce_scatter_copy_in 0 660 multi_tensor_copy",
                "fsdp2.reduce_copy 0 880 elementwise"}));
  const std::vector<std::string> old = kernels(fsdp2(1, "2.8", kBf16), "fsdp2.");
  EXPECT_EQ(old.front(), "fsdp2.all_gather_copy_in Sequential 1100 elementwise");
  EXPECT_EQ(std::count_if(old.begin(), old.end(), [](const std::string& k) { return k.find("reduce_copy") != k.npos; }),
            0);
}

// A reduce_dtype other than the parameters' dtype casts the reduced shard back, on the stream the
// reduction ran on, and the optimizer waits for the cast. float16 over 4 ranks divides by 2
// before the reduce-scatter and by 2 after it, in kernels of its own; NCCL divides bfloat16 itself.
TEST(Fsdp2Kernels, CastsAndDividesAfterTheReductionRunOnItsStream) {
  const PlanResult bf16 = fsdp2(2, "2.14", R"({"param_dtype":"bfloat16"})");
  const ProgramOp& cast = named(bf16, "fsdp2.cast_grads 0");
  EXPECT_EQ(bf16.program.streams[cast.stream], "fsdp.reduce_scatter");
  EXPECT_EQ(cast.bytes_accessed, 55 * (2 + 4));
  EXPECT_EQ(bf16.program.ops[cast.deps.at(0)].role, OpRole::fsdp_reduce_grad);
  EXPECT_TRUE(waits_for(named(bf16, "optimizer.step"), cast.id));
  EXPECT_TRUE(kernels(fsdp2(2, "2.15", kBf16), "fsdp2.cast_grads").empty());

  const PlanResult fp16 = fsdp2(4, "2.15", R"({"param_dtype":"float16","reduce_dtype":"float16"})");
  std::vector<std::string> on_stream;
  for (const ProgramOp& op : fp16.program.ops)
    if (op.iteration == 2 && op.module == "0" && fp16.program.streams[op.stream] == "fsdp.reduce_scatter")
      on_stream.push_back(op.type == OpType::compute ? op.name + " " + std::to_string(op.bytes_accessed) : op.reason);
  // Linear(10,10) over 4 ranks: 3 + 3 padded rows of 10 and 3 bias elements per rank; 132 in all.
  EXPECT_EQ(on_stream, (std::vector<std::string>{"fsdp2.predivide 0 528", "fsdp2 group 0 (post-backward)",
                                                 "fsdp2.postdivide 0 132", "fsdp2.cast_grads 0 198"}));
  EXPECT_TRUE(kernels(fsdp2(4, "2.15", R"({"param_dtype":"bfloat16","reduce_dtype":"bfloat16"})"), "fsdp2.p").empty());
}

// clip_grad_norm_ on FSDP2's gradients: their norms (one read of every shard), one all-reduce of
// the stacked norms (one float32 per gradient) over the shard dim, the scaling (a read and a
// write of every shard), then the step.
TEST(ClipGradNorm, NormsAllReduceOverTheShardDimThenScale) {
  const PlanResult r = fsdp2(4, "2.15", "", R"({"type":"adamw","max_norm":1.0})");
  const IterationRecord& it = iteration(r, 2);
  ASSERT_FALSE(it.collectives.empty());
  const CollectiveRecord& clip = it.collectives.back();
  EXPECT_EQ(clip.op, "c10d_functional.all_reduce");
  EXPECT_EQ(clip.bytes, 4 * 4);
  EXPECT_EQ(clip.dtype, DType::float32);
  EXPECT_EQ(clip.phase, Phase::optimizer);
  const ProgramOp& norm = named(r, "clip_grad_norm.norm");
  const ProgramOp& all_reduce = r.program.ops[clip.op_id];
  const ProgramOp& scale = named(r, "clip_grad_norm.scale");
  const ProgramOp& step = named(r, "optimizer.step");
  EXPECT_EQ(norm.bytes_accessed, 2 * 33 * 4);  // 30 weight and 3 bias elements per Linear and rank
  EXPECT_EQ(scale.bytes_accessed, 2 * norm.bytes_accessed);
  EXPECT_TRUE(waits_for(all_reduce, norm.id));
  EXPECT_TRUE(waits_for(scale, all_reduce.id));
  EXPECT_LT(scale.id, step.id);
  for (const ProgramOp& op : r.program.ops)
    if (op.iteration == 2 && op.role == OpRole::fsdp_reduce_grad) {
      EXPECT_TRUE(waits_for(norm, op.id)) << op.name;
    }
  // A shard dim of one rank reduces nothing.
  const PlanResult one_rank = fsdp2(1, "2.15", "", R"({"max_norm":1.0})");
  for (const CollectiveRecord& c : iteration(one_rank, 2).collectives) EXPECT_NE(c.op, "c10d_functional.all_reduce");
}

TEST(ClipGradNorm, OneAllReducePerShardedMeshDimInMeshOrder) {
  auto clip_groups = [](const std::string& plan) {
    std::vector<std::string> groups;
    const PlanResult r = run_plan(seq_model(), plan);  // named: the loop reads into it
    for (const CollectiveRecord& c : iteration(r, 1).collectives)
      if (c.phase == Phase::optimizer) groups.push_back(c.group + " " + std::to_string(c.bytes));
    return groups;
  };
  // HSDP: Replicate over "rep", Shard over "shard".
  EXPECT_EQ(clip_groups(R"({"world_size":8,"mesh":{"shape":[2,4],"dim_names":["rep","shard"]},"iterations":1,
      "optimizer":{"max_norm":1},"steps":[{"torch.distributed.fsdp.fully_shard":{"module":"",
      "mesh_dim":["rep","shard"]}}]})"),
            std::vector<std::string>{"shard 16"});
  // FSDP2 over tensor parallelism: every gradient a DTensor on (dp, tp), sharded on both.
  EXPECT_EQ(clip_groups(R"({"world_size":4,"mesh":{"shape":[2,2],"dim_names":["dp","tp"]},"iterations":1,
      "torch_version":"2.15","optimizer":{"max_norm":1},"steps":[
      {"parallelize_module":{"module":"","mesh_dim":"tp","plan":{"0":"colwise","2":"rowwise"}}},
      {"torch.distributed.fsdp.fully_shard":{"module":"","mesh_dim":"dp"}}]})"),
            (std::vector<std::string>{"dp 16", "tp 16"}));
  // DDP's gradients are plain tensors, whole on every rank: nothing to reduce.
  EXPECT_TRUE(clip_groups(R"({"world_size":2,"iterations":1,"optimizer":{"max_norm":1},
      "steps":[{"replicate":{"module":""}}]})")
                  .empty());
}

TEST(ClipGradNorm, FailsWherePyTorchFailsOrStratsimDoesNotModel) {
  // FSDP2 on one Linear only: DTensor and plain gradients of one dtype meet in _foreach_norm.
  EXPECT_EQ(plan_error([] {
              run_plan(seq_model(), R"({"world_size":2,"iterations":1,"optimizer":{"max_norm":1},
                  "steps":[{"torch.distributed.fsdp.fully_shard":{"module":"0"}}]})");
            }),
            "optimizer.max_norm: clip_grad_norm_: aten._foreach_norm.Scalar got mixed torch.Tensor and DTensor, need "
            "to convert all torch.Tensor to DTensor before calling distributed operators!");
  // A plain gradient of another dtype passes the norms (its norm is a scalar, taken for replicated)
  // and fails the scaling by the DTensor clip coefficient.
  EXPECT_EQ(plan_error([] {
              run_plan(model_from_json(nlohmann::json::parse(R"({"name": "M", "modules": [
                  {"name": "0", "type": "Linear", "in_features": 10, "out_features": 10},
                  {"name": "1", "type": "Linear", "in_features": 10, "out_features": 10, "dtype": "bfloat16"}]})")),
                       R"({"world_size":2,"iterations":1,"optimizer":{"max_norm":1},
                  "steps":[{"torch.distributed.fsdp.fully_shard":{"module":"0"}}]})");
            }),
            "optimizer.max_norm: clip_grad_norm_: aten._foreach_mul_.Tensor got mixed torch.Tensor and DTensor, need "
            "to convert all torch.Tensor to DTensor before calling distributed operators!");
  // A plain gradient of one element passes for a replicated scalar: PyTorch clips.
  const PlanResult scalar = run_plan(model_from_json(nlohmann::json::parse(R"({"name": "M", "modules": [
      {"name": "0", "type": "Linear", "in_features": 10, "out_features": 1},
      {"name": "1", "type": "Linear", "in_features": 1, "out_features": 1, "bias": false}]})")),
                                     R"({"world_size":2,"iterations":1,"optimizer":{"max_norm":1},
      "steps":[{"torch.distributed.fsdp.fully_shard":{"module":"0"}}]})");
  EXPECT_EQ(iteration(scalar, 1).collectives.back().op, "c10d_functional.all_reduce");
  EXPECT_EQ(iteration(scalar, 1).collectives.back().bytes, 3 * 4);
  // Tensor parallel on Linear 0 only: its gradients live on (dp, tp), the other's on (dp).
  EXPECT_EQ(plan_error([] {
              run_plan(seq_model(), R"({"world_size":4,"mesh":{"shape":[2,2],"dim_names":["dp","tp"]},
                  "iterations":1,"torch_version":"2.15","optimizer":{"max_norm":1},"steps":[
                  {"parallelize_module":{"module":"","mesh_dim":"tp","plan":{"0":"colwise"}}},
                  {"torch.distributed.fsdp.fully_shard":{"module":"","mesh_dim":"dp"}}]})");
            }),
            "optimizer.max_norm: clip_grad_norm_: All operands in aten.stack.default must have the same mesh, but "
            "got DeviceMesh((dp=2), 'cuda', stride=(2,)) and DeviceMesh((dp=2, tp=2), 'cuda', stride=(2, 1)).");
  EXPECT_NE(plan_error([] {
              run_plan(seq_model(), R"({"world_size":2,"iterations":1,"optimizer":{"max_norm":1},
                  "steps":[{"fully_shard":{"module":""}}]})");
            }).find("FullyShardedDataParallel.clip_grad_norm_, which stratsim does not model yet"),
            std::string::npos);
  try {
    plan_from_json(R"({"world_size":1,"optimizer":{"max_norm":-1}})");
    ADD_FAILURE() << "a negative max_norm was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "plan.json: optimizer.max_norm: expected a positive number (the gradient norm to "
              "clip to)");
  }
}

// GradScaler.unscale_ before clipping and the step: one read and write of every gradient, then
// found_inf (one float32) all-reduced by max over each mesh dim the first DTensor gradient is not
// Replicate on (tests/data/golden/grad_scaler_*.json hold what PyTorch 2.15 issued).
TEST(GradScaler, UnscalesEveryGradientAndReducesFoundInfBeforeClipping) {
  const PlanResult r = fsdp2(4, "2.15", "", R"({"type":"adamw","max_norm":1.0,"grad_scaler":true})");
  std::vector<std::string> optimizer;
  for (const CollectiveRecord& c : iteration(r, 2).collectives)
    if (c.phase == Phase::optimizer) optimizer.push_back(c.op + " " + std::to_string(c.bytes) + " " + c.group);
  EXPECT_EQ(optimizer,
            (std::vector<std::string>{"c10d_functional.all_reduce 4 world", "c10d_functional.all_reduce 16 world"}));
  const ProgramOp& unscale = named(r, "grad_scaler.unscale");
  const ProgramOp& norm = named(r, "clip_grad_norm.norm");
  EXPECT_EQ(unscale.bytes_accessed, 2 * 2 * 33 * 4);  // a read and a write of 33 float32 per Linear and rank
  EXPECT_EQ(unscale.role, OpRole::grad_scaler);
  EXPECT_LT(unscale.id, norm.id);
  for (const ProgramOp& op : r.program.ops)
    if (op.iteration == 2 && op.role == OpRole::grad_scaler && op.type == OpType::collective) {
      EXPECT_TRUE(waits_for(op, unscale.id));
      EXPECT_TRUE(waits_for(norm, op.id));
    }
}

TEST(GradScaler, FoundInfFollowsTheFirstGradientsPlacementsAndTheScaler) {
  auto found_inf = [](const nlohmann::json& model, const std::string& plan) {
    std::vector<std::string> groups;
    const PlanResult r = run_plan(model_from_json(model), plan);
    for (const CollectiveRecord& c : iteration(r, 1).collectives)
      if (c.phase == Phase::optimizer && c.bytes == 4) groups.push_back(c.op + " " + c.group);
    return groups;
  };
  const nlohmann::json seq = nlohmann::json::parse(R"({"name": "M", "modules": [
      {"name": "0", "type": "Linear", "in_features": 10, "out_features": 10},
      {"name": "1", "type": "ReLU"}, {"name": "2", "type": "Linear", "in_features": 10, "out_features": 10}]})");
  // FSDP2 over tensor parallelism: the first gradient is sharded on both dims, in mesh order.
  EXPECT_EQ(found_inf(seq, R"({"world_size":4,"mesh":{"shape":[2,2],"dim_names":["dp","tp"]},"iterations":1,
      "torch_version":"2.15","optimizer":{"grad_scaler":true},"steps":[
      {"parallelize_module":{"module":"","mesh_dim":"tp","plan":{"0":"colwise","2":"rowwise"}}},
      {"torch.distributed.fsdp.fully_shard":{"module":"","mesh_dim":"dp"}}]})"),
            (std::vector<std::string>{"c10d_functional.all_reduce dp", "c10d_functional.all_reduce tp"}));
  // HSDP: Replicate over "rep".
  EXPECT_EQ(found_inf(seq, R"({"world_size":8,"mesh":{"shape":[2,4],"dim_names":["rep","shard"]},"iterations":1,
      "optimizer":{"grad_scaler":true},"steps":[{"torch.distributed.fsdp.fully_shard":{"module":"",
      "mesh_dim":["rep","shard"]}}]})"),
            std::vector<std::string>{"c10d_functional.all_reduce shard"});
  // RowwiseParallel's Embedding first: its gradient is Replicate although its weight is Shard(0).
  const nlohmann::json embedding = nlohmann::json::parse(R"({"name": "M", "modules": [
      {"name": "emb", "type": "Embedding", "num_embeddings": 16, "embedding_dim": 8},
      {"name": "fc", "type": "Linear", "in_features": 8, "out_features": 8}]})");
  EXPECT_TRUE(found_inf(embedding, R"json({"world_size":2,"iterations":1,"torch_version":"2.15",
      "optimizer":{"grad_scaler":true},"steps":[{"parallelize_module":{"module":"","mesh_dim":"world","plan":{
      "emb":{"style":"RowwiseParallel","input_layouts":"Replicate()"},"fc":"colwise"}}}]})json")
                  .empty());
  // DDP's gradients are plain: nothing to reduce. FSDP1's ShardedGradScaler reduces over the world.
  EXPECT_TRUE(found_inf(seq, R"({"world_size":2,"iterations":1,"optimizer":{"grad_scaler":true},
      "steps":[{"replicate":{"module":""}}]})")
                  .empty());
  EXPECT_EQ(found_inf(seq, R"({"world_size":4,"mesh":{"shape":[2,2],"dim_names":["rep","shard"]},"iterations":1,
      "optimizer":{"grad_scaler":true},"steps":[{"fully_shard":{"module":"","mesh_dim":["rep","shard"],
      "strategy":"HYBRID_SHARD"}}]})"),
            std::vector<std::string>{"c10d.allreduce_ world"});
}

// FSDP1's gradients are its flat parameter's shard: 220 elements of the two Linears over 4 ranks.
TEST(GradScaler, UnscalesFsdp1sFlatShard) {
  const PlanResult r = run_plan(seq_model(), R"({"world_size":4,"iterations":1,"optimizer":{"grad_scaler":true},
      "steps":[{"fully_shard":{"module":""}}]})");
  EXPECT_EQ(named(r, "grad_scaler.unscale", 1).bytes_accessed, 2 * 55 * 4);
  EXPECT_EQ(iteration(r, 1).collectives.back().op, "c10d.allreduce_");
}

TEST(GradScaler, FailsWherePyTorchFails) {
  // torch.amp.GradScaler takes no float16 gradients (FSDP1's ShardedGradScaler does).
  const Model half = model_from_json(nlohmann::json::parse(R"({"name": "M", "modules": [
      {"name": "0", "type": "Linear", "in_features": 10, "out_features": 10, "dtype": "float16"}]})"));
  EXPECT_EQ(plan_error([&] {
              run_plan(half, R"({"world_size":2,"iterations":1,"optimizer":{"grad_scaler":true},
                  "steps":[{"replicate":{"module":""}}]})");
            }),
            "optimizer.grad_scaler: GradScaler.unscale_: Attempting to unscale FP16 gradients.");
  EXPECT_NO_THROW(run_plan(half, R"({"world_size":2,"iterations":1,"optimizer":{"grad_scaler":true},
      "steps":[{"fully_shard":{"module":""}}]})"));
  // FSDP2 on one Linear only: DTensor and plain gradients of one dtype.
  EXPECT_EQ(plan_error([] {
              run_plan(seq_model(), R"({"world_size":2,"iterations":1,"optimizer":{"grad_scaler":true},
                  "steps":[{"torch.distributed.fsdp.fully_shard":{"module":"0"}}]})");
            }),
            "optimizer.grad_scaler: GradScaler.unscale_: aten._amp_foreach_non_finite_check_and_unscale_.default: "
            "got mixed torch.Tensor and DTensor, need to convert all torch.Tensor to DTensor before calling "
            "distributed operators! Please see https://docs.pytorch.org/docs/main/distributed.tensor.html"
            "#mixed-tensor-and-dtensor-operations for more details.");
}
