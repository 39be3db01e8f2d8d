// The one place the planner writes its output through: program ops (compute and collectives, with
// their streams and dependencies), the CommDebugMode-style collective records of each iteration,
// op roles, and the memory the rank holds as the ops run. DDP, FSDP and tensor parallelism emit
// only through it, so every op is built, numbered and accounted the same way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "context.hpp"

namespace stratsim::core::planner {

// Bytes the rank holds, split the way the memory report shows them, with their peaks, and the
// tensors behind them: every dynamic allocation is a tensor taken and later given back, recorded
// in order (MemoryEvent) so the caching allocator can be replayed over the step. Static storage
// (parameters, optimizer state, bucket buffers) is counted as one figure from the start; its
// tensors enter the history where PyTorch allocates them (record_static).
class MemoryTracker {
 public:
  enum class Kind { other, activation, unsharded, gradient };
  using Tensor = int;
  static constexpr Tensor kNoTensor = -1;  // what allocating 0 bytes gives; release ignores it

  void set_static(std::int64_t bytes) { static_bytes_ = bytes; }
  // A static tensor's storage in the history only (its bytes are in set_static's figure).
  void record_static(std::int64_t bytes, int stream, const std::vector<ProgramOp>& ops);
  void set_iteration(int iteration) { iteration_ = iteration; }
  // `peak_at` names the op that was last emitted when a new peak is reached.
  Tensor allocate(std::int64_t bytes, Kind kind, int stream, const std::vector<ProgramOp>& ops);
  void release(Tensor tensor, const std::vector<ProgramOp>& ops);
  // A held tensor counted under another kind from now on (an op's output once backward saves it).
  void reclassify(Tensor tensor, Kind kind, const std::vector<ProgramOp>& ops);
  void release_all(Kind kind, const std::vector<ProgramOp>& ops);  // zero_grad(set_to_none=True)
  void start_steady_state();                                       // peaks of the last iteration only
  void fill(MemoryReport& report) const;
  std::vector<MemoryEvent> take_events() { return std::move(events_); }

 private:
  struct Live {
    std::int64_t bytes = 0;
    Kind kind = Kind::other;
    int stream = 0;
    bool held = false;
  };
  void count(std::int64_t delta, Kind kind, const std::vector<ProgramOp>& ops);
  void record(bool allocate, Tensor tensor, const Live& live, const std::vector<ProgramOp>& ops);
  Live* held(Tensor tensor);              // nullptr unless taken and not given back
  MemoryReport::AtPeak held_now() const;  // what is held now, by kind

  std::int64_t static_bytes_ = 0, dynamic_bytes_ = 0, activation_bytes_ = 0, unsharded_bytes_ = 0, grad_bytes_ = 0;
  std::int64_t peak_ = 0, activation_peak_ = 0, unsharded_peak_ = 0, grad_peak_ = 0;
  std::string peak_at_;
  MemoryReport::AtPeak at_peak_;
  std::vector<Live> tensors_;  // by Tensor (ids are dense): every tensor taken, and whether it is held
  std::vector<MemoryEvent> events_;
  int iteration_ = 0;
};

// A collective as the planner asks for it; ProgramBuilder::collective turns it into an op and a
// record. In-place collectives (all-reduce, broadcast, an all-to-all of equal parts) may leave
// input_bytes and output_bytes unset: they are then `bytes`.
struct CollectiveSpec {
  CollectiveKind kind = CollectiveKind::all_reduce;
  std::string key;  // CommDebugMode key
  std::vector<int> dims;
  int block_size = 0;  // a sub-group: runs of this many consecutive members (ProgramGroup::block_size)
  std::int64_t bytes = 0;
  std::int64_t input_bytes = -1, output_bytes = -1;  // per-rank send and receive buffers
  DType dtype = DType::float32;
  std::string stream;
  Phase phase = Phase::forward;
  int module = 0;
  std::string reason;
  std::vector<std::string> params{};
  std::vector<int> deps{};
  OpRole role = OpRole::none;
};

class ProgramBuilder {
 public:
  explicit ProgramBuilder(PlanContext& context);

  PlanResult result;
  MemoryTracker memory;

  // The op the last compute was, the collectives the next compute must wait for (DTensor results
  // are waited on before use), the gradient collectives the optimizer waits for, and the last
  // optimizer step (FSDP gathers the shards it wrote).
  int last_compute = -1;
  int last_optimizer_op = -1;
  std::vector<int> pending_deps;
  std::vector<int> iteration_grad_ops;

  // The dtype each module computes in (its FSDP unit's param_dtype under mixed precision, else the
  // parameters' dtype); set once the plan is applied. The simulator picks peak FLOP/s by it.
  std::vector<DType> compute_dtypes;

  void begin_iteration(int index, bool sync);
  int compute(const std::string& name, int module, Phase phase, const std::string& op_class, double flops,
              std::int64_t bytes, std::vector<int> deps, OpRole role, std::vector<std::string> params = {});
  // A kernel on another stream than the compute stream (FSDP2's casts after a reduce-scatter run on
  // its stream): it neither takes the pending waits nor becomes last_compute. Memory-bound: bytes only.
  int side_compute(const std::string& stream, const std::string& name, int module, Phase phase,
                   const std::string& op_class, std::int64_t bytes, std::vector<int> deps, OpRole role);
  // The matrix multiplies compute op `op` runs (ProgramOp::gemms).
  void set_gemms(int op, std::vector<GemmShape> gemms) { result.program.ops[op].gemms = std::move(gemms); }
  int collective(CollectiveSpec spec);
  // Broadcasts `params` from the group's first rank in coalesced buckets of at most 250 MiB (DDP's
  // _sync_module_states and FSDP's sync_module_states both bucket this way); returns the op ids.
  std::vector<int> broadcast_module_states(const std::vector<int>& params, const std::vector<int>& dims, DType dtype,
                                           const std::string& stream, int module, const std::string& reason,
                                           OpRole role);
  // A tensor's storage, taken on `stream`'s allocator pool ("": the compute stream's) and given
  // back by release. A tensor of 0 bytes is no tensor: kNoTensor, which release ignores.
  static constexpr MemoryTracker::Tensor kNoTensor = MemoryTracker::kNoTensor;
  MemoryTracker::Tensor allocate(std::int64_t bytes, MemoryTracker::Kind kind = MemoryTracker::Kind::other,
                                 const std::string& stream = "");
  void release(MemoryTracker::Tensor tensor);
  void reclassify(MemoryTracker::Tensor tensor, MemoryTracker::Kind kind);
  // A static tensor (a parameter, an optimizer state, a bucket buffer) entering the history.
  void record_static(std::int64_t bytes, const std::string& stream = "");
  int memory_stream(const std::string& stream);

 private:
  // A compute op of this iteration without stream, FLOPs or dependencies.
  ProgramOp compute_op(const std::string& name, int module, Phase phase, const std::string& op_class,
                       std::int64_t bytes, OpRole role) const;

  PlanContext& context_;
};

}  // namespace stratsim::core::planner
