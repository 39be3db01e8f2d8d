// The program: what one rank executes for a training run, as an ordered list of compute and
// collective operations with streams and dependencies. It is the contract between the planner
// and its consumers (the simulator, the real executor); README.md "Program format" documents
// its JSON form.
//
// The program is SPMD: one op list serves every rank. Collectives name their group by mesh
// dimensions (and, for a sub-group, a run length); each rank resolves the concrete ranks from the
// mesh (Program::group_ranks), so a 16,384-rank plan stores one program, not 16,384.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "stratsim/core/dtype.hpp"
#include "stratsim/core/mesh.hpp"
#include "stratsim/core/placement.hpp"

namespace stratsim::core {

class JsonReader;  // json_reader.hpp

enum class Phase { init, forward, backward, recompute, optimizer };
// scatter: the group's first rank sends each member its chunk (DTensor's distribute_tensor from
// rank 0, PyTorch 2.5+); `bytes` is the whole buffer the root holds.
enum class CollectiveKind { all_reduce, all_gather, reduce_scatter, broadcast, all_to_all, scatter };
enum class OpType { compute, collective };

std::string_view phase_name(Phase phase);
std::string_view collective_kind_name(CollectiveKind kind);
std::optional<CollectiveKind> find_collective_kind(std::string_view name);  // nullopt for an unknown name
// All-reduces and broadcasts run in place in stratsim's programs (DDP's buckets, NO_SHARD
// gradients, parameter broadcasts); all-gathers, reduce-scatters, all-to-alls and scatters out of place.
bool runs_in_place(CollectiveKind kind);

// What an op acts on, for consumers that run it on real values (`stratsim run --train`) rather
// than on sizes only. Timing consumers ignore it.
enum class OpRole {
  none,
  // compute
  leaf,          // the op's module is a leaf: its forward, backward or recompute (by phase)
  param_matmul,  // torch.mm(x, p) of a container's own parameter params[0]
  optimizer,     // optimizer.step() over everything this rank holds, then zero_grad
  // DDP (replicate): construction checks, module-state sync, bucket rebuild, gradient buckets
  ddp_param_count,     // all-gather of each rank's parameter count
  ddp_param_shapes,    // broadcast of rank 0's parameter shapes and strides
  ddp_module_states,   // broadcast of params[] from the group's first rank
  ddp_bucket_indices,  // broadcast of rank 0's rebuilt bucket order (variable indices + count)
  ddp_bucket_sizes,    // broadcast of rank 0's rebuilt bucket sizes
  ddp_used_map,        // all-reduce of the local used-parameter map (find_unused_parameters)
  ddp_bucket,          // all-reduce of the gradients of params[], in bucket order
  // FSDP (fully_shard), one unit's flat parameter: params[] in flattening order
  fsdp_module_states,   // sync_module_states broadcast of params[] from the group's first rank
  fsdp_unshard,         // all-gather of the flat parameter's shards
  fsdp_reduce_grad,     // reduce-scatter (sharded) or all-reduce (NO_SHARD) of the flat gradient
  fsdp_replicate_grad,  // HSDP: all-reduce of the sharded gradient over the replicate group
  // FSDP2's own kernels around its collectives (copy-in and casts before an all-gather, copy-out
  // after it, chunk_cat before a reduce-scatter, the casts after it): data movement only, which a
  // consumer that gathers and reduces real values does as part of those collectives.
  fsdp2_copy,
  // Tensor parallelism: DTensor redistributions `from` -> `to` of the module's activations
  tp_input,        // the module's input, forward
  tp_output,       // the module's output, forward
  tp_grad_input,   // the gradient of the module's input, backward
  tp_grad_output,  // the gradient of the module's output, backward
  tp_param_grad,   // a Partial gradient of the replicated parameter params[0], summed
  tp_distribute,   // distribute_tensor of params[0] from the group's first rank (scatter or broadcast)
  // clip_grad_norm_ before the step: the per-gradient norms (compute), their all-reduce over a mesh
  // dim the DTensor gradients are sharded on (collective), the scaling of every gradient (compute).
  clip_grad_norm,
  // GradScaler's unscale_ before the step: the unscale and inf check of every gradient (compute),
  // the reduction of found_inf (collective).
  grad_scaler,
};
std::string_view op_role_name(OpRole role);

// The classes of compute the planner gives its ops (ProgramOp::op_class), which a cost model prices
// one by one: every list of them (a device's defaults, what a cost-model file may name, what
// `stratsim calibrate` writes) is this one. "other" is anything unclassified.
inline constexpr std::array<std::string_view, 11> kOpClasses = {
    "gemm", "attention",    "elementwise",      "norm", "embedding", "optimizer", "multi_tensor_copy",
    "cast", "strided_copy", "attention_scores", "other"};

struct GemmShape {
  std::int64_t m = 0, n = 0, k = 0;
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
  bool operator==(const GemmShape&) const = default;
};

struct ProgramOp {
  int id = 0;
  int iteration = 1;  // 1-based training micro-step
  OpType type = OpType::compute;
  std::string name;    // "fc1.forward", "ddp.bucket0", "fsdp.all_gather u1"
  std::string module;  // module FQN the op belongs to ("" = root)
  Phase phase = Phase::forward;
  int stream = 0;         // index into Program::streams; ops of one stream run in list order
  std::vector<int> deps;  // ids of ops on other streams that must finish first

  // compute
  std::string op_class;  // one of kOpClasses
  double flops = 0;
  std::int64_t bytes_accessed = 0;
  // The matrix multiplies a gemm op runs, as cuBLAS sees them: C[m,n] = A[m,k] B[k,n]. A linear
  // layer's forward is one (tokens, out, in); its backward is grad_input (tokens, in, out) when the
  // input needs a gradient and grad_weight (out, in, tokens). GEMM efficiency depends on the shape
  // (sim's cost model), so the simulator needs them, not only the FLOPs.
  std::vector<GemmShape> gemms;

  // collective
  CollectiveKind kind = CollectiveKind::all_reduce;
  std::string comm_key;           // CommDebugMode key: "c10d.allreduce_", "c10d_functional.all_gather_into_tensor"
  int group = -1;                 // index into Program::groups
  std::int64_t bytes = 0;         // logical bytes (all-gather: output; reduce-scatter: input)
  std::int64_t input_bytes = 0;   // per-rank send buffer
  std::int64_t output_bytes = 0;  // per-rank receive buffer
  DType dtype = DType::float32;
  std::string reason;               // "ddp bucket 0", "fsdp unit u1 (pre-forward)", "tp mlp.net1 input"
  std::vector<std::string> params;  // FQNs the collective carries (DDP bucket, FSDP unit)

  OpRole role = OpRole::none;
  Placement from, to;  // tp_* roles: the redistribution, dims normalised to the activation's rank
};

struct ProgramGroup {
  std::vector<int> mesh_dims;  // which mesh dimensions the group spans
  std::string name;            // "dp", "tp", "dp+tp", "world", "dp(4)" (dp in runs of 4)
  int size = 1;                // members per instance
  // 0: the whole group over mesh_dims. k: that group cut into runs of k consecutive members, the
  // rows of mesh.view(-1, k) (FSDP2's post-forward mesh under reshard_after_forward=k).
  int block_size = 0;
};

struct Program {
  int world_size = 1;
  DeviceMesh mesh;
  std::vector<ProgramGroup> groups;
  std::vector<std::string> streams;  // streams[0] is "compute"
  std::vector<ProgramOp> ops;
  int iterations = 0;

  int stream_id(const std::string& name);                               // adds the stream on first use
  int group_id(const std::vector<int>& mesh_dims, int block_size = 0);  // adds the group on first use
  ProgramOp& add(ProgramOp op);                                         // assigns the id

  // Group `group`'s instance that `rank` is in: its members in order, and its index in
  // all_groups(group) (the order every rank creates them in). Every instance of the group.
  std::vector<int> group_ranks(int group, int rank) const;
  int group_index(int group, int rank) const;
  std::vector<std::vector<int>> all_groups(int group) const;
};

nlohmann::json program_to_json(const Program& program);
// Rebuilds a program from its JSON form (what consumers use); throws InputError on bad input.
Program program_from_json(const nlohmann::json& document, const std::string& origin);
// The same for a program inside another document (a timeline's "program"): errors name its path.
Program program_from_json(const JsonReader& document);

// A phase or collective kind by its name; throws InputError naming the field and the names expected.
Phase parse_phase(const JsonReader& node);
CollectiveKind parse_collective_kind(const JsonReader& node);

}  // namespace stratsim::core
