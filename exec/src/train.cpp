// The training interpreter: one rank walks the program's ops in list order (the order PyTorch
// issues them on the CPU) and runs each on real values. The program is the single source of
// truth: which gradients a DDP bucket carries, when an FSDP unit is gathered, where a DTensor is
// redistributed. The interpreter only knows the local semantics of each role (OpRole), so a
// program that forgets a collective or puts a parameter in the wrong bucket trains a different
// model, and the parity check against local training says so.
#include "stratsim/exec/train.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <unordered_map>

#include <fmt/format.h>
#include <Eigen/Core>
#include <nlohmann/json.hpp>

#include "stratsim/core/errors.hpp"
#include "train_numerics.hpp"

namespace stratsim::exec {
namespace {

using core::OpRole;
using core::Placement;
using train::Matrix;
using Clock = std::chrono::steady_clock;

// A local tensor and how it lies over the tensor-parallel group (dims normalised to 2-D).
struct Tensor {
  Matrix value;
  Placement placement = Placement::replicate();
};

// What a leaf's forward left for its backward.
struct Saved {
  Matrix input;
  Placement input_placement, output_placement;
};

enum class Style { plain, colwise, rowwise };

// The program and the values disagree at one op; the message names it.
struct OpFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::span<std::byte> bytes_of(std::span<float> values) { return std::as_writable_bytes(values); }
std::span<float> span_of(Matrix& m) { return {m.data(), static_cast<std::size_t>(m.size())}; }

// Chunk `k` of `n` along dim `d` (DTensor's even split; the caller checked divisibility).
Matrix chunk(const Matrix& m, int d, int n, int k) {
  const Eigen::Index extent = d == 0 ? m.rows() : m.cols();
  if (extent % n != 0)
    throw core::InputError(
        fmt::format("--train: a {}x{} tensor does not split evenly {} ways along dim {} (DTensor "
                    "would pad it; the parity check needs even shards)",
                    m.rows(), m.cols(), n, d));
  if (d == 0) {
    const Eigen::Index rows = m.rows() / n;
    return m.middleRows(k * rows, rows);
  }
  const Eigen::Index cols = m.cols() / n;
  return m.middleCols(k * cols, cols);
}

std::uint64_t digest_of(const Matrix& m) {
  std::uint64_t hash = 1469598103934665603ULL;  // FNV-1a over the bits
  const auto* bytes = reinterpret_cast<const unsigned char*>(m.data());
  for (Eigen::Index i = 0; i < m.size() * static_cast<Eigen::Index>(sizeof(float)); ++i) {
    hash ^= bytes[i];
    hash *= 1099511628211ULL;
  }
  return hash;
}

// FSDP's gradient pre/post division (DefaultState._get_gradient_predivide_factor): divide by f
// before the collective and by world / f after it, so neither sum overflows in low precision.
double predivide_factor(int world) {
  int factor = 1;
  while (world % factor == 0 && world / factor > factor) factor *= 2;
  return factor;
}

int position_in(const std::vector<int>& members, int rank) {
  return static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
}

struct UnitState {
  const core::FsdpUnitReport* report = nullptr;
  std::vector<int> params;
  int group = -1;  // program group of the shard dims
  int world = 1, position = 0, dp_world = 1;
  bool sharded = true;
  std::vector<float> shard, shard_grad, pending;
  bool has_grad = false;
  train::OptimizerState optimizer;
};

class Trainer {
 public:
  Trainer(const core::Model& model, const core::Plan& plan, const core::PlanResult& planned, Backend& backend,
          const TrainOptions& options)
      : model_(model),
        plan_(plan),
        planned_(planned),
        program_(planned.program),
        backend_(backend),
        options_(options),
        rank_(backend.rank()) {}

  TrainRecord run() {
    setup();
    connect();
    backend_.barrier();
    origin_ = Clock::now();
    record_.timing.timings.resize(program_.ops.size());
    record_.timing.algorithms.resize(program_.ops.size());
    int iteration = 0;
    bool initialised = false;
    for (const core::ProgramOp& op : program_.ops) {
      if (op.iteration != iteration) start_iteration(iteration = op.iteration);
      if (!initialised && op.phase != core::Phase::init) {
        // fully_shard keeps only the shards once construction (sync_module_states included) is done.
        initialised = true;
        for (UnitState& unit : units_)
          if (unit.sharded) poison(unit);
      }
      const double start = seconds();
      run_named(op);
      record_.timing.timings[op.id] = {start, start, seconds()};
    }
    record_.timing.wall_seconds = seconds();
    gather_state_dict();
    check_parity();
    backend_.barrier();
    return std::move(record_);
  }

 private:
  // ----------------------------------------------------------------------------------------------
  // Setup: layouts, data slices, initial values, communicators.

  void setup() {
    record_.rank = rank_;
    record_.timing.rank = rank_;
    const core::DeviceMesh& mesh = program_.mesh;
    // Gradients are averaged over the data-parallel dims: ranks that differ there see different rows.
    for (const auto& ddp : planned_.ddp) add_data_dims(ddp.group_dims);
    for (const auto& unit : planned_.fsdp) {
      add_data_dims(unit.group_dims);
      add_data_dims(unit.replicate_dims);
    }
    std::sort(data_dims_.begin(), data_dims_.end());
    const std::vector<int> data_group = mesh.group_ranks(rank_, data_dims_);
    dp_ = static_cast<int>(data_group.size());
    dp_position_ = position_in(data_group, rank_);
    tp_dims_ = planned_.input_dims;
    const std::vector<int> tp_group = mesh.group_ranks(rank_, tp_dims_);
    tp_ = static_cast<int>(tp_group.size());
    tp_position_ = position_in(tp_group, rank_);
    replica_rows_ = plan_.batch_size * (planned_.input_placement == Placement::shard(0) ? tp_ : 1);
    output_features_ = train::output_features(model_);

    params_ = train::init_parameters(model_, options_.seed);
    for (std::size_t p = 0; p < params_.size(); ++p) params_[p] = local_slice(static_cast<int>(p), params_[p]);
    perturb_unsynced_copies();
    grads_.resize(params_.size());
    for (std::size_t p = 0; p < params_.size(); ++p) grads_[p] = Matrix::Zero(params_[p].rows(), params_[p].cols());
    for (const core::ProgramOp& op : program_.ops)
      if (op.role == OpRole::tp_param_grad)
        for (const std::string& fqn : op.params) partial_grads_.emplace(model_.find_param(fqn), Matrix());
    for (auto& [p, grad] : partial_grads_) grad = Matrix::Zero(params_[p].rows(), params_[p].cols());
    param_optimizer_.resize(params_.size());
    for (std::size_t u = 0; u < planned_.fsdp.size(); ++u) units_.push_back(make_unit(planned_.fsdp[u]));
    for (std::size_t i = 0; i < planned_.ddp.size(); ++i) {
      ddp_params_.emplace_back();
      for (std::size_t p = 0; p < planned_.params.size(); ++p)
        if (planned_.params[p].ddp == static_cast<int>(i)) ddp_params_.back().push_back(static_cast<int>(p));
    }
    for (std::size_t p = 0; p < model_.params.size(); ++p)
      param_index_.emplace(model_.params[p].fqn, static_cast<int>(p));
    plan_reshard_after_forward();
    // A boundary on a container is checked where its input first meets a leaf.
    const std::vector<core::ForwardStep> steps = core::flat_forward(model_);
    for (const core::TpBoundary& boundary : planned_.tp_inputs)
      for (const core::ForwardStep& step : steps)
        if (step.kind == core::ForwardStep::Kind::child && model_.in_subtree(step.index, boundary.module)) {
          boundaries_[step.index].push_back(boundary);
          break;
        }
  }

  // Module-state broadcasts (DDP init_sync, FSDP sync_module_states) only matter if ranks start
  // different: every copy the plan promises to overwrite from the group's first rank starts
  // doubled, so a program that forgets a broadcast (or its parameters) trains a different model.
  void perturb_unsynced_copies() {
    const std::vector<int> coordinate = program_.mesh.coordinate(rank_);
    for (std::size_t p = 0; p < params_.size(); ++p) {
      const core::ParamLayout& layout = planned_.params[p];
      const bool synced = (layout.ddp >= 0 && planned_.ddp[layout.ddp].init_sync) ||
                          (layout.fsdp_unit >= 0 && planned_.fsdp[layout.fsdp_unit].sync_module_states);
      const std::vector<int> dims = synced ? wrapper_dims(static_cast<int>(p)) : std::vector<int>{};
      if (std::any_of(dims.begin(), dims.end(), [&](int d) { return coordinate[d] != 0; })) params_[p] *= 2.0f;
    }
  }

  // The mesh dims parameter p's data-parallel wrapper spans: DDP's group, or FSDP's shard and
  // replicate groups; none without a wrapper.
  std::vector<int> wrapper_dims(int p) const {
    const core::ParamLayout& layout = planned_.params[p];
    if (layout.ddp >= 0) return planned_.ddp[layout.ddp].group_dims;
    if (layout.fsdp_unit < 0) return {};
    std::vector<int> dims = planned_.fsdp[layout.fsdp_unit].group_dims;
    const std::vector<int>& replicas = planned_.fsdp[layout.fsdp_unit].replicate_dims;
    dims.insert(dims.end(), replicas.begin(), replicas.end());
    return dims;
  }

  // FULL_SHARD and HYBRID_SHARD free a non-root unit's parameters when its forward returns
  // (_post_forward_reshard): poison them after the unit's last forward step, so backward reads
  // them only through the program's pre-backward all-gather.
  void plan_reshard_after_forward() {
    // Forward order as after_forward_step keys it: leaf module m, or -(p + 1) for a matmul of p.
    std::vector<int> steps;
    for (const core::ForwardStep& step : core::flat_forward(model_))
      steps.push_back(step.kind == core::ForwardStep::Kind::child ? step.index : -(step.index + 1));
    for (std::size_t u = 0; u < units_.size(); ++u) {
      const core::FsdpUnitReport& report = *units_[u].report;
      const bool frees = report.strategy == core::ShardingStrategy::full_shard ||
                         report.strategy == core::ShardingStrategy::hybrid_shard;
      if (report.root || !frees || units_[u].params.empty()) continue;
      const int unit_module = model_.find_module(report.module);
      int last = 0;
      bool found = false;
      for (int step : steps) {
        const int owner = step >= 0 ? step : model_.params[-step - 1].module;
        if (model_.in_subtree(owner, unit_module)) {
          last = step;
          found = true;
        }
      }
      if (found) reshard_after_[last].push_back(static_cast<int>(u));
    }
  }

  void after_forward_step(int step) {
    auto it = reshard_after_.find(step);
    if (it == reshard_after_.end()) return;
    for (int u : it->second) poison(units_[u]);
  }

  void add_data_dims(const std::vector<int>& dims) {
    for (int d : dims)
      if (std::find(data_dims_.begin(), data_dims_.end(), d) == data_dims_.end()) data_dims_.push_back(d);
  }

  // The part of a full parameter this rank holds under tensor parallelism.
  Matrix local_slice(int p, const Matrix& full) const {
    const core::ParamLayout& layout = planned_.params[p];
    if (!layout.placement.is_shard()) return full;
    const std::vector<int> group = program_.mesh.group_ranks(rank_, layout.tp_dims);
    const int dim = full.rows() == 1 && model_.params[p].shape.size() == 1 ? 1 : layout.placement.dim;
    return chunk(full, dim, static_cast<int>(group.size()), position_in(group, rank_));
  }

  UnitState make_unit(const core::FsdpUnitReport& report) {
    UnitState unit;
    unit.report = &report;
    for (const std::string& fqn : report.params) unit.params.push_back(model_.find_param(fqn));
    if (unit.params.empty()) return unit;  // a unit without a handle (its children took everything)
    unit.group = group_of(report.group_dims);
    const std::vector<int> members = program_.mesh.group_ranks(rank_, report.group_dims);
    unit.world = static_cast<int>(members.size());
    unit.position = position_in(members, rank_);
    unit.dp_world = unit.world * program_.mesh.group_size(report.replicate_dims);
    unit.sharded = report.strategy != core::ShardingStrategy::no_shard;
    const std::vector<float> flat = flatten(unit, params_);
    if (unit.sharded) {
      unit.shard.assign(flat.begin() + unit.position * report.shard_numel,
                        flat.begin() + (unit.position + 1) * report.shard_numel);
    } else {
      unit.shard = flat;
    }
    return unit;
  }

  // The unit's flat parameter or gradient (`tensors` is params_ or grads_), padded to
  // world x shard for sharded strategies.
  std::vector<float> flatten(const UnitState& unit, const std::vector<Matrix>& tensors) const {
    std::vector<float> flat(unit.sharded ? unit.report->padded_numel : unit.report->numel, 0.0f);
    for (std::size_t i = 0; i < unit.params.size(); ++i) {
      const Matrix& tensor = tensors[unit.params[i]];
      std::copy(tensor.data(), tensor.data() + tensor.size(), flat.begin() + unit.report->offsets[i]);
    }
    return flat;
  }

  void unflatten_values(const UnitState& unit, const std::vector<float>& flat) {
    for (std::size_t i = 0; i < unit.params.size(); ++i) {
      Matrix& value = params_[unit.params[i]];
      std::copy(flat.begin() + unit.report->offsets[i], flat.begin() + unit.report->offsets[i] + value.size(),
                value.data());
    }
  }

  // Unsharded values are stale once the shard moves on: NaN makes any use before the next
  // all-gather visible in the parity check instead of silently reading old weights.
  void poison(const UnitState& unit) {
    for (int p : unit.params) params_[p].setConstant(std::numeric_limits<float>::quiet_NaN());
  }

  int group_of(const std::vector<int>& dims) const {
    for (std::size_t g = 0; g < program_.groups.size(); ++g)
      if (program_.groups[g].mesh_dims == dims) return static_cast<int>(g);
    throw std::runtime_error(
        fmt::format("the program has no group over mesh dims {}", program_.mesh.describe_dims(dims)));
  }

  // One communicator per program group this rank is in, created in group order on every rank.
  void connect() {
    for (std::size_t g = 0; g < program_.groups.size(); ++g) {
      const std::vector<int>& dims = program_.groups[g].mesh_dims;
      const std::string key = fmt::format("train.g{}.i{}", g, program_.mesh.group_index(rank_, dims));
      comms_.push_back(backend_.communicator(key, program_.mesh.group_ranks(rank_, dims)));
    }
  }

  double seconds() const { return std::chrono::duration<double>(Clock::now() - origin_).count(); }

  // ----------------------------------------------------------------------------------------------
  // Iterations and the loss.

  void start_iteration(int iteration) {
    iteration_ = iteration;
    loss_seeded_ = false;
    saved_.clear();
    saved_matmul_.clear();
    // This rank's rows: its data-parallel replica's slice of the global batch, then its
    // tensor-parallel piece when the model input is sharded.
    const std::int64_t first = dp_position_ * replica_rows_;
    Matrix input = train::input_rows(options_.seed, iteration, first, replica_rows_, model_.input_features);
    const Placement placement = planned_.input_placement;
    act_ = {placement.is_shard() ? chunk(input, placement.dim, tp_, tp_position_) : input, placement};
  }

  // The loss is F.mse_loss over the global batch. A rank seeds the gradient of its block of the
  // output scaled by 1 / (replica rows x features): the data-parallel average then divides by the
  // replica count, giving exactly the global mean's gradient.
  void seed_loss() {
    loss_seeded_ = true;
    const Placement placement = act_.placement;
    if (placement.is_partial())
      throw std::runtime_error("the model output is Partial(): the program never reduced it, so there is no loss");
    const std::int64_t first = dp_position_ * replica_rows_;
    Matrix target = train::target_rows(options_.seed, iteration_, first, replica_rows_, output_features_);
    if (placement.is_shard()) target = chunk(target, placement.dim, tp_, tp_position_);
    if (target.rows() != act_.value.rows() || target.cols() != act_.value.cols())
      throw std::runtime_error(fmt::format("the model output is {}x{} on this rank, the loss expects {}x{}",
                                           act_.value.rows(), act_.value.cols(), target.rows(), target.cols()));
    if (owns_loss_share(placement)) {
      if (static_cast<int>(record_.squared_error.size()) < iteration_) record_.squared_error.resize(iteration_, 0.0);
      record_.squared_error[iteration_ - 1] += train::squared_error(act_.value, target);
    }
    const double scale = 1.0 / (static_cast<double>(replica_rows_) * static_cast<double>(output_features_));
    grad_ = {train::squared_error_grad(act_.value, target, scale), placement};
  }

  // Exactly one rank reports each element of the global loss: coordinate 0 on every mesh dim
  // that does not split the output.
  bool owns_loss_share(Placement output) const {
    const std::vector<int> coordinate = program_.mesh.coordinate(rank_);
    for (int d = 0; d < program_.mesh.ndim(); ++d) {
      const bool data = std::find(data_dims_.begin(), data_dims_.end(), d) != data_dims_.end();
      const bool split = output.is_shard() && std::find(tp_dims_.begin(), tp_dims_.end(), d) != tp_dims_.end();
      if (!data && !split && coordinate[d] != 0) return false;
    }
    return true;
  }

  // ----------------------------------------------------------------------------------------------
  // Ops.

  // Every failure names the op it happened in; transport and input errors keep their types.
  void run_named(const core::ProgramOp& op) {
    try {
      run_op(op);
    } catch (const OpFailure&) {
      throw;
    } catch (const CommError&) {
      throw;
    } catch (const core::InputError&) {
      throw;
    } catch (const std::exception& error) {
      throw OpFailure(fmt::format("op {} \"{}\": {}", op.id, op.name, error.what()));
    }
  }

  void run_op(const core::ProgramOp& op) {
    if (op.phase == core::Phase::backward && !loss_seeded_) seed_loss();
    switch (op.role) {
      case OpRole::leaf:
        return run_leaf(op);
      case OpRole::param_matmul:
        return run_param_matmul(op);
      case OpRole::optimizer:
        return optimizer_step();
      case OpRole::ddp_param_count:
        return ddp_param_count(op);
      case OpRole::ddp_param_shapes:
        return ddp_param_shapes(op);
      case OpRole::ddp_module_states:
      case OpRole::fsdp_module_states:
        return broadcast_params(op);
      case OpRole::ddp_bucket_indices:
      case OpRole::ddp_bucket_sizes:
        return ddp_bucket_layout(op);
      case OpRole::ddp_used_map:
        return ddp_used_map(op);
      case OpRole::ddp_bucket:
        return ddp_bucket(op);
      case OpRole::fsdp_unshard:
        return fsdp_unshard(op);
      case OpRole::fsdp_reduce_grad:
        return fsdp_reduce_grad(op);
      case OpRole::fsdp_replicate_grad:
        return fsdp_replicate_grad(op);
      case OpRole::tp_input:
      case OpRole::tp_output:
        return redistribute_op(op, act_);
      case OpRole::tp_grad_input:
      case OpRole::tp_grad_output:
        return redistribute_op(op, grad_);
      case OpRole::tp_param_grad:
        return tp_param_grad(op);
      case OpRole::none:
        break;
    }
    throw std::runtime_error("the op says nothing about what it acts on (a program without roles?)");
  }

  Communicator& comm_of(const core::ProgramOp& op) { return *comms_.at(op.group); }

  void collective(const core::ProgramOp& op, core::CollectiveKind kind, core::DType dtype, std::span<std::byte> input,
                  std::span<std::byte> output, int root = 0) {
    Communicator& comm = comm_of(op);
    CollectiveCall call;
    call.kind = kind;
    call.dtype = dtype;
    call.input = input;
    call.output = output;
    call.root = root;
    comm.run(call);
    record_.timing.algorithms[op.id] = comm.algorithm(kind);
  }

  void all_reduce(const core::ProgramOp& op, std::span<float> values) {
    collective(op, core::CollectiveKind::all_reduce, core::DType::float32, bytes_of(values), bytes_of(values));
  }

  int param_of(const std::string& fqn) const {
    auto it = param_index_.find(fqn);
    if (it == param_index_.end())
      throw std::runtime_error(fmt::format("the program names an unknown parameter {}", fqn));
    return it->second;
  }

  // ---- compute

  std::vector<const Matrix*> module_params(const core::Module& module) const {
    std::vector<const Matrix*> out;
    for (int p : module.params) out.push_back(&params_[p]);
    return out;
  }

  Style style_of(const core::Module& module) const {
    if (module.leaf != core::LeafKind::linear || module.params.empty()) return Style::plain;
    const Placement weight = planned_.params[module.params[0]].placement;
    if (!weight.is_shard()) return Style::plain;
    return weight.dim == 0 ? Style::colwise : Style::rowwise;
  }

  static bool elementwise(core::LeafKind kind) {
    using core::LeafKind;
    return kind == LeafKind::relu || kind == LeafKind::sigmoid || kind == LeafKind::tanh || kind == LeafKind::silu ||
           kind == LeafKind::gelu || kind == LeafKind::identity;
  }

  // A Replicate tensor becomes Shard(d) by keeping the local chunk: DTensor needs no collective.
  void localize(Tensor& tensor, Placement wanted) const {
    if (tensor.placement.is_replicate() && wanted.is_shard()) {
      tensor.value = chunk(tensor.value, wanted.dim, tp_, tp_position_);
      tensor.placement = wanted;
    }
  }

  void run_leaf(const core::ProgramOp& op) {
    const int m = model_.find_module(op.module);
    if (m < 0) throw std::runtime_error(fmt::format("unknown module \"{}\"", op.module));
    if (op.phase == core::Phase::backward) return leaf_backward(op, m);
    if (op.phase == core::Phase::recompute) return leaf_recompute(op, m);
    leaf_forward(op, m);
  }

  // DTensor.from_local trusts the declared layout: an activation laid out otherwise is
  // mislabelled (PyTorch then fails on shapes or computes on the wrong shard), so it is refused.
  // Declared Replicate, computed Shard: the local chunk, no collective (DTensor does the same).
  void enter_boundaries(const core::ProgramOp& op, int leaf) {
    auto it = boundaries_.find(leaf);
    if (it == boundaries_.end()) return;
    for (const core::TpBoundary& boundary : it->second) {
      if (act_.placement == boundary.desired) continue;  // the program's tp_input already moved it
      const std::string name = model_.modules[boundary.module].fqn;
      expect(op, act_.placement == boundary.declared,
             fmt::format("\"{}\" declares its input {} but receives a {} activation", name, boundary.declared.str(),
                         act_.placement.str()));
      expect(op, boundary.declared.is_replicate() && boundary.desired.is_shard(),
             fmt::format("\"{}\" needs its input moved from {} to {} and the program has no collective for it", name,
                         boundary.declared.str(), boundary.desired.str()));
      localize(act_, boundary.desired);
    }
  }

  void leaf_forward(const core::ProgramOp& op, int m) {
    enter_boundaries(op, m);
    const core::Module& module = model_.modules[m];
    const Style style = style_of(module);
    Placement out;
    float bias_scale = 1.0f;
    if (style == Style::rowwise) {
      expect(op, act_.placement == Placement::shard(1), "RowwiseParallel needs its input Shard(-1)");
      out = Placement::partial();
      bias_scale = 1.0f / static_cast<float>(tp_);
    } else if (style == Style::colwise) {
      expect(op, act_.placement.is_replicate(), "ColwiseParallel needs its input Replicate()");
      out = Placement::shard(1);
    } else {
      const bool rows_only = act_.placement.is_replicate() || act_.placement == Placement::shard(0);
      expect(op, elementwise(module.leaf) ? !act_.placement.is_partial() : rows_only,
             fmt::format("a {} cannot run on a {} activation", module.type, act_.placement.str()));
      out = act_.placement;
    }
    const std::vector<const Matrix*> params = module_params(module);
    Matrix y = train::leaf_forward(module, params, act_.value, bias_scale);
    saved_[m] = {std::move(act_.value), act_.placement, out};
    act_ = {std::move(y), out};
    after_forward_step(m);
  }

  // Recomputation is deterministic: the saved input already holds what it would produce. The
  // op still does its real work so timings stay honest.
  void leaf_recompute(const core::ProgramOp& op, int m) {
    auto it = saved_.find(m);
    if (it == saved_.end()) return;
    const core::Module& module = model_.modules[m];
    for (int p : module.params)
      expect(op, !params_[p].hasNaN(),
             fmt::format("recomputes with {} freed (no all-gather before it)", model_.params[p].fqn));
    const float bias_scale = style_of(module) == Style::rowwise ? 1.0f / static_cast<float>(tp_) : 1.0f;
    (void)train::leaf_forward(module, module_params(module), it->second.input, bias_scale);
  }

  void leaf_backward(const core::ProgramOp& op, int m) {
    auto it = saved_.find(m);
    if (it == saved_.end()) throw std::runtime_error(fmt::format("backward before forward"));
    const Saved& saved = it->second;
    const core::Module& module = model_.modules[m];
    // The gradient comes back in the output's placement (a Partial output's gradient is Replicate).
    const Placement expected = saved.output_placement.is_partial() ? Placement::replicate() : saved.output_placement;
    localize(grad_, expected);
    expect(op, grad_.placement == expected,
           fmt::format("the gradient of its output is {}, expected {}", grad_.placement.str(), expected.str()));
    std::vector<Matrix*> grads;
    for (int p : module.params) grads.push_back(grad_target(p));
    Matrix grad_x = train::leaf_backward(module, module_params(module), saved.input, grad_.value, grads);
    const Style style = style_of(module);
    const Placement placement = style == Style::colwise ? Placement::partial() : saved.input_placement;
    grad_ = {std::move(grad_x), placement};
  }

  void run_param_matmul(const core::ProgramOp& op) {
    if (op.params.empty()) throw std::runtime_error(fmt::format("no parameter"));
    const int p = param_of(op.params.front());
    if (op.phase == core::Phase::recompute) return;
    if (op.phase == core::Phase::forward) {
      expect(op, act_.placement.is_replicate() || act_.placement == Placement::shard(0),
             fmt::format("torch.mm needs rows-only sharding, the activation is {}", act_.placement.str()));
      Matrix y = train::param_matmul_forward(params_[p], act_.value);
      saved_matmul_[p] = {std::move(act_.value), act_.placement, act_.placement};
      act_.value = std::move(y);
      after_forward_step(-(p + 1));
      return;
    }
    const Saved& saved = saved_matmul_.at(p);
    localize(grad_, saved.output_placement);
    expect(op, grad_.placement == saved.output_placement, "the gradient's placement differs from the output's");
    Matrix* grad_p = grad_target(p);
    grad_.value = train::param_matmul_backward(params_[p], saved.input, grad_.value, grad_p);
  }

  // Where backward puts parameter p's gradient: .grad, or for a Partial gradient this
  // micro-step's own buffer, summed over the tp group (from_local's backward) before it joins
  // .grad: summing .grad itself would multiply what earlier micro-steps accumulated.
  Matrix* grad_target(int p) {
    if (!model_.params[p].requires_grad) return nullptr;
    auto it = partial_grads_.find(p);
    return it != partial_grads_.end() ? &it->second : &grads_[p];
  }

  void expect(const core::ProgramOp& op, bool condition, const std::string& what) const {
    if (!condition) throw OpFailure(fmt::format("op {} \"{}\": {}", op.id, op.name, what));
  }

  // ---- optimizer

  void optimizer_step() {
    for (std::size_t p = 0; p < params_.size(); ++p) {
      if (!model_.params[p].requires_grad || planned_.params[p].fsdp_unit >= 0) continue;
      train::optimizer_step(plan_.optimizer, span_of(params_[p]), span_of(grads_[p]), param_optimizer_[p]);
    }
    for (UnitState& unit : units_) {
      if (unit.has_grad) train::optimizer_step(plan_.optimizer, unit.shard, unit.shard_grad, unit.optimizer);
      unit.has_grad = false;
      // NO_SHARD keeps the parameters as views of the full flat parameter; sharded strategies
      // gather them again before the next use.
      if (unit.sharded) poison(unit);
      else unflatten_values(unit, unit.shard);
    }
    for (Matrix& grad : grads_) grad.setZero();  // zero_grad(set_to_none=True)
  }

  // ---- DDP

  // The DDP instance a DDP op belongs to: replicate() on the op's module.
  std::size_t ddp_index(const core::ProgramOp& op) const {
    for (std::size_t i = 0; i < planned_.ddp.size(); ++i)
      if (planned_.ddp[i].module == op.module) return i;
    throw std::runtime_error(fmt::format("no replicate() on module \"{}\"", op.module));
  }
  const std::vector<int>& ddp_of(const core::ProgramOp& op) const { return ddp_params_[ddp_index(op)]; }
  const core::DdpReport& ddp_report_of(const core::ProgramOp& op) const { return planned_.ddp[ddp_index(op)]; }

  // _verify_param_shape_across_processes, part 1: every rank holds the same number of parameters.
  void ddp_param_count(const core::ProgramOp& op) {
    const int size = comm_of(op).size();
    std::int64_t mine = static_cast<std::int64_t>(ddp_of(op).size());
    std::vector<std::int64_t> counts(size);
    collective(op, core::CollectiveKind::all_gather, core::DType::int64, std::as_writable_bytes(std::span(&mine, 1)),
               std::as_writable_bytes(std::span(counts)));
    for (int r = 0; r < size; ++r)
      if (counts[r] != mine)
        throw std::runtime_error(
            fmt::format("DDP expects same model across all ranks, but Rank {} has {} params, "
                        "while rank {} has inconsistent {} params.",
                        rank_, mine, r, counts[r]));
  }

  // Part 2: rank 0's shapes and strides, checked by everyone.
  void ddp_param_shapes(const core::ProgramOp& op) {
    std::vector<std::int64_t> mine;
    for (int p : ddp_of(op)) {
      const std::vector<std::int64_t>& shape = planned_.params[p].local_shape;
      mine.insert(mine.end(), shape.begin(), shape.end());
      std::int64_t stride = 1;
      std::vector<std::int64_t> strides(shape.size());
      for (std::size_t d = shape.size(); d-- > 0;) {
        strides[d] = stride;
        stride *= shape[d];
      }
      mine.insert(mine.end(), strides.begin(), strides.end());
    }
    std::vector<std::int64_t> received = mine;
    auto buffer = std::as_writable_bytes(std::span(received));
    collective(op, core::CollectiveKind::broadcast, core::DType::int64, buffer, buffer);
    if (received != mine)
      throw std::runtime_error(
          fmt::format("DDP expects same model across all ranks, but rank {}'s parameter shapes "
                      "differ from rank 0's",
                      rank_));
  }

  // Module states (DDP init_sync, FSDP sync_module_states): the group's first rank's values win.
  void broadcast_params(const core::ProgramOp& op) {
    std::vector<float> flat;
    std::vector<int> params;
    for (const std::string& fqn : op.params) params.push_back(param_of(fqn));
    for (int p : params) flat.insert(flat.end(), params_[p].data(), params_[p].data() + params_[p].size());
    collective(op, core::CollectiveKind::broadcast, core::DType::float32, bytes_of(flat), bytes_of(flat));
    std::size_t at = 0;
    for (int p : params) {
      std::copy(flat.begin() + at, flat.begin() + at + params_[p].size(), params_[p].data());
      at += params_[p].size();
    }
    if (op.role == OpRole::fsdp_module_states)
      for (UnitState& unit : units_) refresh_shard(unit);
  }

  void refresh_shard(UnitState& unit) {
    if (unit.params.empty() || std::isnan(params_[unit.params.front()](0))) return;  // no handle, or freed
    const std::vector<float> flat = flatten(unit, params_);
    if (!unit.sharded) {
      unit.shard = flat;
      return;
    }
    const std::int64_t s = unit.report->shard_numel;
    unit.shard.assign(flat.begin() + unit.position * s, flat.begin() + (unit.position + 1) * s);
  }

  // sync_bucket_indices: rank 0's rebuilt layout, checked against this rank's.
  void ddp_bucket_layout(const core::ProgramOp& op) {
    const core::DdpReport& report = ddp_report_of(op);
    std::vector<std::int32_t> mine;
    if (op.role == OpRole::ddp_bucket_indices) {
      for (const core::DdpBucket& bucket : report.rebuilt)
        mine.insert(mine.end(), bucket.indices.begin(), bucket.indices.end());
      mine.push_back(static_cast<std::int32_t>(report.rebuilt.size()));
    } else {
      for (const core::DdpBucket& bucket : report.rebuilt)
        mine.push_back(static_cast<std::int32_t>(bucket.indices.size()));
    }
    std::vector<std::int32_t> received = mine;
    received.resize(static_cast<std::size_t>(op.input_bytes / 4), 0);
    auto buffer = std::as_writable_bytes(std::span(received));
    collective(op, core::CollectiveKind::broadcast, core::DType::int32, buffer, buffer);
    received.resize(mine.size());
    if (received != mine)
      throw std::runtime_error(fmt::format("rank {} rebuilt its DDP buckets differently from rank 0", rank_));
  }

  // find_unused_parameters: every parameter of these models is used on every rank.
  void ddp_used_map(const core::ProgramOp& op) {
    std::vector<std::int32_t> used(static_cast<std::size_t>(op.input_bytes / 4), 1);
    auto buffer = std::as_writable_bytes(std::span(used));
    collective(op, core::CollectiveKind::all_reduce, core::DType::int32, buffer, buffer);
    const int size = comm_of(op).size();
    for (std::int32_t count : used)
      if (count != size) throw std::runtime_error("a parameter went unused on some rank");
  }

  // One bucket: gradients copied in bucket order, averaged over the group (Reducer divides on
  // copy-in; the compress hooks divide the low-precision copy), written back to .grad.
  void ddp_bucket(const core::ProgramOp& op) {
    const int size = comm_of(op).size();
    std::vector<int> params;
    for (const std::string& fqn : op.params) params.push_back(param_of(fqn));
    std::vector<float> flat;
    for (int p : params) flat.insert(flat.end(), grads_[p].data(), grads_[p].data() + grads_[p].size());
    const core::CommHook hook = ddp_report_of(op).comm_hook;
    if (hook == core::CommHook::fp16_compress) {
      compressed_all_reduce<Eigen::half>(op, flat, size, core::DType::float16);
    } else if (hook == core::CommHook::bf16_compress) {
      compressed_all_reduce<Eigen::bfloat16>(op, flat, size, core::DType::bfloat16);
    } else {
      const float inverse = 1.0f / static_cast<float>(size);
      for (float& g : flat) g *= inverse;
      all_reduce(op, flat);
    }
    std::size_t at = 0;
    for (int p : params) {
      std::copy(flat.begin() + at, flat.begin() + at + grads_[p].size(), grads_[p].data());
      at += grads_[p].size();
    }
  }

  // fp16/bf16_compress_hook: cast the bucket down, divide by the group size in that precision,
  // all-reduce, cast back. Gloo 0.5 sums float16 natively; it has no bfloat16 type, so bf16
  // buckets are summed as float32 and rounded to bf16 again (NCCL would accumulate in bf16).
  template <typename Half>
  void compressed_all_reduce(const core::ProgramOp& op, std::vector<float>& flat, int size, core::DType dtype) {
    std::vector<Half> compressed(flat.size());
    for (std::size_t i = 0; i < flat.size(); ++i)
      compressed[i] = Half(static_cast<float>(Half(flat[i])) / static_cast<float>(size));
    if (dtype == core::DType::float16) {
      auto buffer = std::as_writable_bytes(std::span(compressed));
      collective(op, core::CollectiveKind::all_reduce, dtype, buffer, buffer);
      for (std::size_t i = 0; i < flat.size(); ++i) flat[i] = static_cast<float>(compressed[i]);
      return;
    }
    for (std::size_t i = 0; i < flat.size(); ++i) flat[i] = static_cast<float>(compressed[i]);
    all_reduce(op, flat);
    for (float& g : flat) g = static_cast<float>(Half(g));
  }

  // ---- FSDP

  UnitState& unit_of(const core::ProgramOp& op) {
    if (op.params.empty()) throw std::runtime_error(fmt::format("no parameters"));
    const int unit = planned_.params[param_of(op.params.front())].fsdp_unit;
    if (unit < 0) throw std::runtime_error(fmt::format("{} is in no FSDP unit", op.params.front()));
    return units_[unit];
  }

  void fsdp_unshard(const core::ProgramOp& op) {
    UnitState& unit = unit_of(op);
    std::vector<float> full(unit.shard.size() * unit.world);
    collective(op, core::CollectiveKind::all_gather, core::DType::float32, bytes_of(unit.shard), bytes_of(full));
    unflatten_values(unit, full);
  }

  void fsdp_reduce_grad(const core::ProgramOp& op) {
    UnitState& unit = unit_of(op);
    std::vector<float> flat = flatten(unit, grads_);
    const double pre = predivide_factor(unit.dp_world);
    if (pre > 1)
      for (float& g : flat) g /= static_cast<float>(pre);
    if (unit.sharded) {
      unit.pending.assign(unit.report->shard_numel, 0.0f);
      collective(op, core::CollectiveKind::reduce_scatter, core::DType::float32, bytes_of(flat),
                 bytes_of(unit.pending));
    } else {
      all_reduce(op, flat);
      unit.pending = std::move(flat);
    }
    for (int p : unit.params) grads_[p].setZero();  // the unsharded gradient is freed
    if (unit.report->replicate_dims.empty()) finish_reduction(unit);
  }

  void fsdp_replicate_grad(const core::ProgramOp& op) {
    UnitState& unit = unit_of(op);
    all_reduce(op, unit.pending);
    finish_reduction(unit);
  }

  // Post-divide, then accumulate into the sharded gradient (kept across no_sync steps).
  void finish_reduction(UnitState& unit) {
    const double post = unit.dp_world / predivide_factor(unit.dp_world);
    if (post > 1)
      for (float& g : unit.pending) g /= static_cast<float>(post);
    if (unit.has_grad) {
      for (std::size_t i = 0; i < unit.pending.size(); ++i) unit.shard_grad[i] += unit.pending[i];
    } else {
      unit.shard_grad = unit.pending;
      unit.has_grad = true;
    }
  }

  // ---- tensor parallelism

  void redistribute_op(const core::ProgramOp& op, Tensor& tensor) {
    if (op.phase == core::Phase::recompute) return replay_collective(op);
    expect(
        op, tensor.placement == op.from,
        fmt::format("the program redistributes from {} but the tensor is {}", op.from.str(), tensor.placement.str()));
    tensor.value = redistribute(op, tensor.value, op.from, op.to);
    tensor.placement = op.to;
  }

  // A recomputed forward's collectives move buffers of the program's sizes: their values equal
  // the saved forward's, which the backward already uses.
  void replay_collective(const core::ProgramOp& op) {
    std::vector<std::byte> input(static_cast<std::size_t>(op.input_bytes)),
        output(static_cast<std::size_t>(op.output_bytes));
    const bool in_place = op.kind == core::CollectiveKind::all_reduce || op.kind == core::CollectiveKind::broadcast;
    collective(op, op.kind, op.dtype, input, in_place ? std::span<std::byte>(input) : std::span<std::byte>(output));
  }

  // Packs the n chunks along `dim` one after another (chunk k is what rank k gets or sends).
  static std::vector<float> pack_chunks(const Matrix& m, int dim, int n) {
    std::vector<float> out;
    out.reserve(static_cast<std::size_t>(m.size()));
    for (int k = 0; k < n; ++k) {
      const Matrix piece = chunk(m, dim, n, k);
      out.insert(out.end(), piece.data(), piece.data() + piece.size());
    }
    return out;
  }

  // The inverse: n blocks of rows x cols, concatenated along `dim`.
  static Matrix unpack_chunks(const std::vector<float>& flat, int dim, int n, Eigen::Index rows, Eigen::Index cols) {
    Matrix out(dim == 0 ? rows * n : rows, dim == 0 ? cols : cols * n);
    for (int k = 0; k < n; ++k) {
      Eigen::Map<const Matrix> block(flat.data() + static_cast<std::size_t>(k * rows * cols), rows, cols);
      if (dim == 0) out.middleRows(k * rows, rows) = block;
      else out.middleCols(k * cols, cols) = block;
    }
    return out;
  }

  Matrix redistribute(const core::ProgramOp& op, Matrix local, Placement from, Placement to) {
    const int n = comm_of(op).size();
    if (from.is_partial() && to.is_replicate()) {
      all_reduce(op, span_of(local));
      return local;
    }
    if (from.is_shard() && to.is_replicate()) {
      std::vector<float> gathered(static_cast<std::size_t>(local.size()) * n);
      collective(op, core::CollectiveKind::all_gather, core::DType::float32, bytes_of(span_of(local)),
                 bytes_of(gathered));
      return unpack_chunks(gathered, from.dim, n, local.rows(), local.cols());
    }
    if (from.is_partial() && to.is_shard()) {
      std::vector<float> packed = pack_chunks(local, to.dim, n);
      Matrix out = chunk(local, to.dim, n, 0);  // shape of one chunk
      collective(op, core::CollectiveKind::reduce_scatter, core::DType::float32, bytes_of(packed),
                 bytes_of(span_of(out)));
      return out;
    }
    if (from.is_shard() && to.is_shard() && from.dim != to.dim) {
      // Send chunk k along the new dim to rank k; what arrives stacks along the old dim.
      std::vector<float> packed = pack_chunks(local, to.dim, n);
      std::vector<float> received(packed.size());
      collective(op, core::CollectiveKind::all_to_all, core::DType::float32, bytes_of(packed), bytes_of(received));
      const Matrix piece = chunk(local, to.dim, n, 0);
      return unpack_chunks(received, from.dim, n, piece.rows(), piece.cols());
    }
    throw std::runtime_error(fmt::format("no redistribution from {} to {}", from.str(), to.str()));
  }

  // A replicated parameter applied to sharded rows has a Partial gradient: summed, not averaged.
  void tp_param_grad(const core::ProgramOp& op) {
    if (op.params.empty()) throw std::runtime_error(fmt::format("no parameter"));
    const int p = param_of(op.params.front());
    Matrix& partial = partial_grads_.at(p);
    all_reduce(op, span_of(partial));
    grads_[p] += partial;
    partial.setZero();
  }

  // ----------------------------------------------------------------------------------------------
  // After training: FSDP's full state dict, then the parity check.

  // FULL_STATE_DICT: one all-gather per sharded unit, so every rank holds full parameters.
  void gather_state_dict() {
    for (UnitState& unit : units_) {
      if (!unit.sharded || unit.params.empty()) continue;
      std::vector<float> full(unit.shard.size() * unit.world);
      CollectiveCall call;
      call.kind = core::CollectiveKind::all_gather;
      call.input = bytes_of(unit.shard);
      call.output = bytes_of(full);
      comms_.at(unit.group)->run(call);
      unflatten_values(unit, full);
      ++record_.state_dict_all_gathers;
    }
  }

  void check_parity() {
    std::vector<int> optimizer_after;
    for (const core::ProgramOp& op : program_.ops)
      if (op.role == OpRole::optimizer) optimizer_after.push_back(op.iteration);
    const train::ReferenceRun reference = train::train_reference(
        model_, plan_.optimizer, options_.seed, program_.iterations, replica_rows_ * dp_, optimizer_after,
        /*record_grads=*/false);
    record_.global_rows = replica_rows_ * dp_;
    record_.output_features = output_features_;
    record_.optimizer_after = optimizer_after;
    record_.reference_loss = reference.losses;
    for (std::size_t p = 0; p < params_.size(); ++p) {
      const int index = static_cast<int>(p);
      HeldParam held;
      held.fqn = model_.params[p].fqn;
      held.slice = slice_name(index);
      held.synchronised = synchronised(index);
      const Matrix expected = local_slice(index, reference.params[p]);
      const Matrix& actual = params_[p];
      for (Eigen::Index i = 0; i < actual.size(); ++i) {
        const double a = actual.data()[i], b = expected.data()[i];
        const double diff = std::isnan(a) ? std::numeric_limits<double>::infinity() : std::abs(a - b);
        held.max_abs_diff = std::max(held.max_abs_diff, diff);
        held.max_abs_reference = std::max(held.max_abs_reference, std::abs(b));
        if (!(diff <= options_.atol + options_.rtol * std::abs(b))) ++held.mismatches;
      }
      held.digest = digest_of(actual);
      record_.params.push_back(std::move(held));
    }
  }

  // A parameter trains like the local model only if its wrapper averages its gradient over every
  // data-parallel dim: one that covers fewer (replicate over "shard" while another wrapper splits
  // the batch over "rep" too), or none (ignored_modules), diverges across replicas by design.
  bool synchronised(int p) const {
    if (dp_ == 1 || !model_.params[p].requires_grad) return true;
    const std::vector<int> covered = wrapper_dims(p);
    return std::all_of(data_dims_.begin(), data_dims_.end(),
                       [&](int d) { return std::find(covered.begin(), covered.end(), d) != covered.end(); });
  }

  std::string slice_name(int p) const {
    const core::ParamLayout& layout = planned_.params[p];
    if (!layout.placement.is_shard()) return "full";
    const std::vector<int> group = program_.mesh.group_ranks(rank_, layout.tp_dims);
    return fmt::format("{} {}/{} of dim {}", program_.mesh.describe_dims(layout.tp_dims), position_in(group, rank_) + 1,
                       group.size(), layout.placement.dim);
  }

  const core::Model& model_;
  const core::Plan& plan_;
  const core::PlanResult& planned_;
  const core::Program& program_;
  Backend& backend_;
  const TrainOptions& options_;
  const int rank_;

  std::vector<int> data_dims_, tp_dims_;
  int dp_ = 1, dp_position_ = 0, tp_ = 1, tp_position_ = 0;
  std::int64_t replica_rows_ = 0, output_features_ = 0;

  std::vector<Matrix> params_, grads_;
  std::vector<train::OptimizerState> param_optimizer_;
  std::vector<UnitState> units_;
  std::vector<std::vector<int>> ddp_params_;
  std::unordered_map<std::string, int> param_index_;
  std::vector<std::unique_ptr<Communicator>> comms_;

  int iteration_ = 0;
  bool loss_seeded_ = false;
  Tensor act_, grad_;
  std::map<int, Saved> saved_, saved_matmul_;
  std::map<int, std::vector<core::TpBoundary>> boundaries_;  // by the leaf where they are entered
  std::map<int, Matrix> partial_grads_;                      // this micro-step's Partial gradients
  std::map<int, std::vector<int>> reshard_after_;            // forward step -> units freed after it

  Clock::time_point origin_;
  TrainRecord record_;
};

}  // namespace

TrainRecord run_training(const core::Model& model, const core::Plan& plan, const core::PlanResult& planned,
                         Backend& backend, const TrainOptions& options) {
  const std::string why = train_unsupported_reason(model, plan, planned);
  if (!why.empty()) throw core::InputError(why);
  return Trainer(model, plan, planned, backend, options).run();
}

}  // namespace stratsim::exec
