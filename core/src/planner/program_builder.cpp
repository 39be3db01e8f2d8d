#include "program_builder.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "stratsim/core/bucketing.hpp"

namespace stratsim::core::planner {
namespace {

void sort_unique(std::vector<int>& ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
}

}  // namespace

void MemoryTracker::count(std::int64_t delta, Kind kind, const std::vector<ProgramOp>& ops) {
  dynamic_bytes_ += delta;
  if (kind == Kind::activation) activation_bytes_ += delta;
  if (kind == Kind::unsharded) unsharded_bytes_ += delta;
  if (kind == Kind::gradient) grad_bytes_ += delta;
  activation_peak_ = std::max(activation_peak_, activation_bytes_);
  unsharded_peak_ = std::max(unsharded_peak_, unsharded_bytes_);
  grad_peak_ = std::max(grad_peak_, grad_bytes_);
  if (static_bytes_ + dynamic_bytes_ > peak_) {
    peak_ = static_bytes_ + dynamic_bytes_;
    peak_at_ = ops.empty() ? "start" : fmt::format("iteration {} {}", ops.back().iteration, ops.back().name);
    at_peak_ = held_now();
  }
}

MemoryReport::AtPeak MemoryTracker::held_now() const {
  return {.resident = static_bytes_,
          .activations = activation_bytes_,
          .unsharded_params = unsharded_bytes_,
          .gradients = grad_bytes_,
          .outputs_and_temporaries = dynamic_bytes_ - activation_bytes_ - unsharded_bytes_ - grad_bytes_};
}

void MemoryTracker::record(bool allocate, Tensor tensor, const Live& live, const std::vector<ProgramOp>& ops) {
  events_.push_back({.allocate = allocate,
                     .tensor = tensor,
                     .bytes = live.bytes,
                     .stream = live.stream,
                     .op = ops.empty() ? -1 : ops.back().id,
                     .iteration = iteration_});
}

void MemoryTracker::record_static(std::int64_t bytes, int stream, const std::vector<ProgramOp>& ops) {
  if (bytes <= 0) return;
  const Live live{bytes, Kind::other, stream, false};  // never given back
  tensors_.push_back(live);
  record(true, static_cast<Tensor>(tensors_.size()) - 1, live, ops);
}

MemoryTracker::Tensor MemoryTracker::allocate(std::int64_t bytes, Kind kind, int stream,
                                              const std::vector<ProgramOp>& ops) {
  if (bytes <= 0) return kNoTensor;
  const Live live{bytes, kind, stream, true};
  tensors_.push_back(live);
  const auto tensor = static_cast<Tensor>(tensors_.size()) - 1;
  record(true, tensor, live, ops);
  count(bytes, kind, ops);
  return tensor;
}

MemoryTracker::Live* MemoryTracker::held(Tensor tensor) {
  if (tensor < 0 || tensor >= static_cast<Tensor>(tensors_.size()) || !tensors_[tensor].held) return nullptr;
  return &tensors_[tensor];
}

void MemoryTracker::release(Tensor tensor, const std::vector<ProgramOp>& ops) {
  Live* live = held(tensor);
  if (!live) return;
  live->held = false;
  record(false, tensor, *live, ops);
  count(-live->bytes, live->kind, ops);
}

void MemoryTracker::reclassify(Tensor tensor, Kind kind, const std::vector<ProgramOp>& ops) {
  Live* live = held(tensor);
  if (!live) return;
  count(-live->bytes, live->kind, ops);
  live->kind = kind;
  count(live->bytes, kind, ops);
}

// Oldest first, as zero_grad walks the parameters.
void MemoryTracker::release_all(Kind kind, const std::vector<ProgramOp>& ops) {
  for (Tensor tensor = 0; tensor < static_cast<Tensor>(tensors_.size()); ++tensor)
    if (tensors_[tensor].held && tensors_[tensor].kind == kind) release(tensor, ops);
}

void MemoryTracker::start_steady_state() {
  peak_ = static_bytes_ + dynamic_bytes_;
  activation_peak_ = activation_bytes_;
  unsharded_peak_ = unsharded_bytes_;
  grad_peak_ = grad_bytes_;
  peak_at_ = "iteration start";
  at_peak_ = held_now();
}

void MemoryTracker::fill(MemoryReport& report) const {
  report.gradients = grad_peak_;
  report.activations = activation_peak_;
  report.unsharded_params_peak = unsharded_peak_;
  report.peak = peak_;
  report.peak_at = peak_at_;
  report.at_peak = at_peak_;
}

ProgramBuilder::ProgramBuilder(PlanContext& context) : context_(context) { result.memory_streams = {"compute"}; }

int ProgramBuilder::memory_stream(const std::string& stream) {
  if (stream.empty()) return 0;
  std::vector<std::string>& streams = result.memory_streams;
  const auto it = std::find(streams.begin(), streams.end(), stream);
  if (it != streams.end()) return static_cast<int>(it - streams.begin());
  streams.push_back(stream);
  return static_cast<int>(streams.size()) - 1;
}

MemoryTracker::Tensor ProgramBuilder::allocate(std::int64_t bytes, MemoryTracker::Kind kind,
                                               const std::string& stream) {
  return memory.allocate(bytes, kind, memory_stream(stream), result.program.ops);
}

void ProgramBuilder::release(MemoryTracker::Tensor tensor) {
  if (tensor != kNoTensor) memory.release(tensor, result.program.ops);
}

void ProgramBuilder::reclassify(MemoryTracker::Tensor tensor, MemoryTracker::Kind kind) {
  memory.reclassify(tensor, kind, result.program.ops);
}

void ProgramBuilder::record_static(std::int64_t bytes, const std::string& stream) {
  memory.record_static(bytes, memory_stream(stream), result.program.ops);
}

void ProgramBuilder::begin_iteration(int index, bool sync) {
  IterationRecord record;
  record.index = index;
  record.sync = sync;
  result.iterations.push_back(record);
  iteration_grad_ops.clear();
  memory.set_iteration(index);
}

ProgramOp ProgramBuilder::compute_op(const std::string& name, int module, Phase phase, const std::string& op_class,
                                     std::int64_t bytes, OpRole role) const {
  ProgramOp op;
  op.iteration = context_.iteration;
  op.type = OpType::compute;
  op.name = name;
  op.module = context_.model.modules[module].fqn;
  op.phase = phase;
  op.op_class = op_class;
  op.dtype = compute_dtypes[module];
  op.bytes_accessed = bytes;
  op.role = role;
  return op;
}

int ProgramBuilder::compute(const std::string& name, int module, Phase phase, const std::string& op_class, double flops,
                            std::int64_t bytes, std::vector<int> deps, OpRole role, std::vector<std::string> params) {
  ProgramOp op = compute_op(name, module, phase, op_class, bytes, role);
  op.stream = 0;
  op.flops = flops;
  op.params = std::move(params);
  deps.insert(deps.end(), pending_deps.begin(), pending_deps.end());
  pending_deps.clear();
  sort_unique(deps);
  std::erase(deps, -1);
  op.deps = std::move(deps);
  last_compute = result.program.add(std::move(op)).id;
  result.iterations.back().compute_flops += flops;
  return last_compute;
}

int ProgramBuilder::side_compute(const std::string& stream, const std::string& name, int module, Phase phase,
                                 const std::string& op_class, std::int64_t bytes, std::vector<int> deps, OpRole role) {
  ProgramOp op = compute_op(name, module, phase, op_class, bytes, role);
  op.stream = result.program.stream_id(stream);
  sort_unique(deps);
  std::erase(deps, -1);
  op.deps = std::move(deps);
  return result.program.add(std::move(op)).id;
}

int ProgramBuilder::collective(CollectiveSpec spec) {
  if (spec.input_bytes < 0) spec.input_bytes = spec.bytes;
  if (spec.output_bytes < 0) spec.output_bytes = spec.bytes;
  Program& program = result.program;
  ProgramOp op;
  op.iteration = context_.iteration;
  op.type = OpType::collective;
  op.kind = spec.kind;
  op.comm_key = spec.key;
  op.group = program.group_id(spec.dims, spec.block_size);
  op.bytes = spec.bytes;
  op.input_bytes = spec.input_bytes;
  op.output_bytes = spec.output_bytes;
  op.dtype = spec.dtype;
  op.stream = program.stream_id(spec.stream);
  op.phase = spec.phase;
  op.module = context_.model.modules[spec.module].fqn;
  op.reason = spec.reason;
  op.params = spec.params;
  op.role = spec.role;
  op.name = fmt::format("{} {}", collective_kind_name(spec.kind), spec.reason);
  std::erase(spec.deps, -1);
  sort_unique(spec.deps);
  op.deps = std::move(spec.deps);
  const int id = program.add(std::move(op)).id;

  CollectiveRecord record;
  record.iteration = context_.iteration;
  record.op_id = id;
  record.op = std::move(spec.key);
  record.kind = spec.kind;
  record.group_id = program.ops.back().group;
  record.group = program.groups[record.group_id].name;
  record.bytes = spec.bytes;
  record.input_bytes = spec.input_bytes;
  record.output_bytes = spec.output_bytes;
  record.dtype = spec.dtype;
  record.phase = spec.phase;
  record.module = program.ops.back().module;
  record.reason = std::move(spec.reason);
  record.params = std::move(spec.params);
  // Collectives issued while the plan is applied run before iteration 1 but are not the training
  // loop's: CommDebugMode around the loop does not see them.
  if (spec.role == OpRole::tp_distribute) result.setup.push_back(std::move(record));
  else result.iterations.back().collectives.push_back(std::move(record));
  return id;
}

std::vector<int> ProgramBuilder::broadcast_module_states(const std::vector<int>& params, const std::vector<int>& dims,
                                                         DType dtype, const std::string& stream, int module,
                                                         const std::string& reason, OpRole role) {
  constexpr std::int64_t kBroadcastBucket = 250 * kMiB;
  std::vector<int> ids;
  std::vector<std::string> names;
  std::int64_t bytes = 0;
  auto flush = [&]() {
    if (names.empty()) return;
    ids.push_back(collective({.kind = CollectiveKind::broadcast,
                              .key = "c10d.broadcast_",
                              .dims = dims,
                              .bytes = bytes,
                              .dtype = dtype,
                              .stream = stream,
                              .phase = Phase::init,
                              .module = module,
                              .reason = reason,
                              .params = std::move(names),
                              .role = role}));
    names.clear();
    bytes = 0;
  };
  for (int p : params) {
    const std::int64_t b = context_.param_bytes(p);
    if (bytes > 0 && bytes + b > kBroadcastBucket) flush();
    names.push_back(context_.model.params[p].fqn);
    bytes += b;
  }
  flush();
  return ids;
}

}  // namespace stratsim::core::planner
