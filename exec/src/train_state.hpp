// The training interpreter's parts (internal to stratsim_exec). One rank's Trainer (train.cpp)
// walks the program; each parallelism keeps its own state in its own file and acts on the rank's
// shared state below:
//   train_state.cpp   RankState: the batch's layout over the mesh, parameters and gradients as
//                     this rank holds them, communicators, the record being filled
//   train_ddp.cpp     DdpReplicas: construction checks, module-state broadcasts, gradient buckets
//   train_fsdp.cpp    FsdpUnits: flat shards, all-gather, reduce-scatter, reshard/free, state dict
//   train_fsdp2.cpp   Fsdp2Groups: FSDP2's per-parameter Shard(0) rows, copy-in/out, the same cycle
//   train_dtensor.cpp DtensorLayouts: redistributions, input boundaries, Partial gradient sums
//   train_parity.cpp  check_parity: the comparison against local training
// The split follows PyTorch's: each wrapper owns what it adds to a module (DDP's buckets, FSDP's
// flat parameters, DTensor's placements); the tensors themselves are the module's.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "stratsim/core/planner.hpp"
#include "stratsim/exec/communicator.hpp"
#include "stratsim/exec/train.hpp"
#include "train_numerics.hpp"

namespace stratsim::exec::train {

// A local tensor and how it lies over the tensor-parallel group (dims normalised to its rank). A
// [batch, features] tensor is its matrix. A sequence model's [batch, seq, features] tensor is its
// [batch * seq, features] matrix (row-major, so element for element PyTorch's) with `sequences`
// its local batch: every leaf acts on rows, and only a split along dim 0 or 1 needs the batch.
struct Tensor {
  Matrix value;
  core::Placement placement = core::Placement::replicate();
  std::int64_t sequences = 0;  // 0: a [batch, features] tensor

  int rank() const { return sequences > 0 ? 3 : 2; }
  int last_dim() const { return rank() - 1; }
};
// Chunk `k` of `n` of the tensor along its dim `d` (DTensor's even split; InputError when it does
// not divide), and the inverse: equal pieces concatenated along `d`.
Tensor chunk_of(const Tensor& tensor, int d, int n, int k);
Tensor concat(const std::vector<Tensor>& pieces, int d);
// A flat buffer read back as a tensor shaped like `like`.
Tensor shaped_like(const Tensor& like, const float* data);

// The program and the values disagree at one op; the message names it.
struct OpFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::span<std::byte> bytes_of(std::span<float> values);
std::span<float> span_of(Matrix& m);
// Chunk `k` of `n` along dim `d` (DTensor's even split); InputError when it does not divide.
Matrix chunk(const Matrix& m, int d, int n, int k);
int position_in(const std::vector<int>& members, int rank);
// FSDP's gradient pre/post division (DefaultState._get_gradient_predivide_factor): divide by f
// before the collective and by world / f after it, so neither sum overflows in low precision.
double predivide_factor(int world);
// The last forward step that runs inside `module`'s subtree, as the trainer keys steps (leaf
// module m, or -(p + 1) for a matmul of parameter p); nullopt when none does. FSDP frees a unit or
// group that reshards after forward there.
std::optional<int> last_forward_step(const core::Model& model, int module);

// What every part of the interpreter reads and writes on one rank. Built once: the layout of the
// batch over the mesh, then the parameters (initialised, sliced for tensor parallelism, perturbed
// where a module-state broadcast must overwrite them) and their zeroed gradients.
struct RankState {
  RankState(const core::Model& model, const core::Plan& plan, const core::PlanResult& planned, Backend& backend,
            const TrainOptions& options);

  const core::Model& model;
  const core::Plan& plan;
  const core::PlanResult& planned;
  const core::Program& program;
  Backend& backend;
  const TrainOptions& options;
  const int rank;

  // The batch over the mesh: data-parallel dims split the samples, tensor-parallel dims the input
  // when it is sharded (its batch, sequence or features).
  std::vector<int> data_dims, tp_dims;
  int dp = 1, dp_position = 0, tp = 1, tp_position = 0;
  // A replica's batch: its samples, each `sequence` positions long for a sequence model (0
  // otherwise), and its rows (samples x positions).
  std::int64_t replica_sequences = 0, sequence = 0, replica_rows = 0, output_features = 0;

  std::vector<Matrix> params, grads;  // per model parameter, as this rank holds it
  std::unordered_map<std::string, int> param_index;
  std::vector<std::unique_ptr<Communicator>> comms;  // per program group
  TrainRecord record;

  // One communicator per program group this rank is in, created in group order on every rank.
  void connect();
  int param_of(const std::string& fqn) const;
  int group_of(const std::vector<int>& dims) const;
  Communicator& comm_of(const core::ProgramOp& op) { return *comms.at(op.group); }
  void collective(const core::ProgramOp& op, core::CollectiveKind kind, core::DType dtype, std::span<std::byte> input,
                  std::span<std::byte> output, int root = 0);
  void all_reduce(const core::ProgramOp& op, std::span<float> values);
  void expect(const core::ProgramOp& op, bool condition, const std::string& what) const;
  // The mesh dims parameter p's data-parallel wrapper spans (DDP's group, FSDP's shard and
  // replicate groups), none without a wrapper.
  std::vector<int> wrapper_dims(int p) const;
  // The part of a full parameter this rank holds under tensor parallelism.
  Matrix local_slice(int p, const Matrix& full) const;

 private:
  void add_data_dims(const std::vector<int>& dims);
  void perturb_unsynced_copies();
};

// ---- DDP (train_ddp.cpp)

class DdpReplicas {
 public:
  explicit DdpReplicas(RankState& state);
  // _verify_param_shape_across_processes: the parameter count, then rank 0's shapes.
  void param_count(const core::ProgramOp& op);
  void param_shapes(const core::ProgramOp& op);
  // sync_bucket_indices and the find_unused_parameters map.
  void bucket_layout(const core::ProgramOp& op);
  void used_map(const core::ProgramOp& op);
  void bucket(const core::ProgramOp& op);

 private:
  std::size_t instance_of(const core::ProgramOp& op) const;
  template <typename Half>
  void compressed_all_reduce(const core::ProgramOp& op, std::vector<float>& flat, int size, core::DType dtype);

  RankState& state_;
  std::vector<std::vector<int>> params_;  // per DDP instance: the parameters it replicates
};

// Module states (DDP init_sync, FSDP sync_module_states): the group's first rank's values win.
void broadcast_module_states(RankState& state, const core::ProgramOp& op);

// ---- FSDP (train_fsdp.cpp)

class FsdpUnits {
 public:
  explicit FsdpUnits(RankState& state);
  ~FsdpUnits();  // where Unit is complete
  bool holds(int p) const { return state_.planned.params[p].fsdp_unit >= 0; }
  // fully_shard keeps only the shards once construction (sync_module_states included) is done.
  void free_after_construction();
  // FULL_SHARD and HYBRID_SHARD free a non-root unit after its last forward step (module m, or
  // -(p + 1) for a matmul of parameter p).
  void after_forward_step(int step);
  void refresh_shards();  // after sync_module_states overwrote the unsharded values
  void unshard(const core::ProgramOp& op);
  void reduce_grad(const core::ProgramOp& op);
  void replicate_grad(const core::ProgramOp& op);
  void optimizer_step();
  void gather_state_dict();  // FULL_STATE_DICT after the last step: every rank holds full parameters

 private:
  struct Unit;
  Unit make_unit(const core::FsdpUnitReport& report);
  std::vector<float> flatten(const Unit& unit, const std::vector<Matrix>& tensors) const;
  void unflatten_values(const Unit& unit, const std::vector<float>& flat);
  void poison(const Unit& unit);
  void refresh_shard(Unit& unit);
  Unit& unit_of(const core::ProgramOp& op);
  void finish_reduction(Unit& unit);
  void plan_reshard_after_forward();

  RankState& state_;
  std::vector<Unit> units_;
  std::map<int, std::vector<int>> reshard_after_;  // forward step -> units freed after it
};

// ---- FSDP2 (train_fsdp2.cpp)

class Fsdp2Groups {
 public:
  explicit Fsdp2Groups(RankState& state);
  ~Fsdp2Groups();
  bool holds(int p) const { return state_.planned.params[p].fsdp2_group >= 0; }
  bool owns(const core::ProgramOp& op) const;  // the op's parameters are an FSDP2 group's
  void free_after_construction();
  void after_forward_step(int step);
  void refresh_shards();
  void unshard(const core::ProgramOp& op);
  void reduce_grad(const core::ProgramOp& op);
  void replicate_grad(const core::ProgramOp& op);
  void optimizer_step();
  void gather_state_dict();

 private:
  struct Group;
  Group make_group(const core::FsdpParamGroupReport& report);
  void refresh(Group& group);
  void keep_post_forward(Group& group);
  void gather(const Group& group, const std::vector<std::vector<float>>& pieces, int ranks,
              const std::function<void(CollectiveCall&)>& run);
  void poison(const Group& group);
  Group& group_of(const core::ProgramOp& op);
  void finish_reduction(Group& group);
  void plan_reshard_after_forward();

  RankState& state_;
  std::vector<Group> groups_;
  std::map<int, std::vector<int>> reshard_after_;
};

// ---- DTensor (train_dtensor.cpp)

enum class Style { plain, colwise, rowwise };

class DtensorLayouts {
 public:
  explicit DtensorLayouts(RankState& state);
  Style style_of(const core::Module& module) const;
  // A Replicate tensor becomes Shard(d) by keeping the local chunk: DTensor needs no collective.
  void localize(Tensor& tensor, core::Placement wanted) const;
  // The input layouts declared at `leaf` (the first leaf of a parallelised module), checked.
  void enter_boundaries(const core::ProgramOp& op, int leaf, Tensor& activation) const;
  void redistribute_op(const core::ProgramOp& op, Tensor& tensor);
  void sum_partial_grad(const core::ProgramOp& op);
  // distribute_tensor from the group's first rank: its full parameter, scattered chunk by chunk
  // (Shard) or broadcast (Replicate), replaces every member's copy.
  void distribute(const core::ProgramOp& op);
  // Where backward puts parameter p's gradient (nullptr: it needs none).
  Matrix* grad_target(int p);

 private:
  void replay_collective(const core::ProgramOp& op);
  Tensor redistribute(const core::ProgramOp& op, Tensor local, core::Placement from, core::Placement to);

  RankState& state_;
  std::map<int, std::vector<core::TpBoundary>> boundaries_;  // by the leaf where they are entered
  std::map<int, Matrix> partial_grads_;                      // this micro-step's Partial gradients
  std::vector<Matrix> initial_params_;  // the full initial parameters, on a group's root, for distribute
};

// ---- Parity (train_parity.cpp)

// Compares every parameter this rank holds with the same slice of the local reference and fills
// state.record (params, losses of the reference, the optimizer steps).
void check_parity(RankState& state);

}  // namespace stratsim::exec::train
