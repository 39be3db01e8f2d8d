// The training interpreter's trainer: one rank walks the program's ops in list order (the order
// PyTorch issues them on the CPU) and runs each on real values. It owns the walk itself (the
// iterations, the data and the loss, the activation and its gradient, the leaves' forward and
// backward, the optimizer step for parameters no FSDP unit holds) and hands each parallelism's ops
// to that parallelism's part (train_state.hpp). The program is the single source of truth: which
// gradients a DDP bucket carries, when an FSDP unit is gathered, where a DTensor is redistributed.
// Each part knows only the local semantics of its roles (OpRole), so a program that forgets a
// collective or puts a parameter in the wrong bucket trains a different model, and the parity
// check against local training says so.
#include "stratsim/exec/train.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "stratsim/core/errors.hpp"
#include "train_numerics.hpp"
#include "train_state.hpp"

namespace stratsim::exec {
namespace {

using core::OpRole;
using core::Placement;
using train::Matrix;
using train::Style;
using train::Tensor;
using Clock = std::chrono::steady_clock;

// What a leaf's forward left for its backward.
struct Saved {
  Matrix input;
  Placement input_placement, output_placement;
};

class Trainer {
 public:
  Trainer(const core::Model& model, const core::Plan& plan, const core::PlanResult& planned, Backend& backend,
          const TrainOptions& options)
      : state_(model, plan, planned, backend, options),
        model_(model),
        program_(planned.program),
        ddp_(state_),
        fsdp_(state_),
        fsdp2_(state_),
        dtensor_(state_) {
    param_optimizer_.resize(state_.params.size());
  }

  TrainRecord run() {
    state_.connect();
    state_.backend.barrier();
    origin_ = Clock::now();
    TrainRecord& record = state_.record;
    record.timing.timings.resize(program_.ops.size());
    record.timing.algorithms.resize(program_.ops.size());
    int iteration = 0;
    bool initialised = false;
    for (const core::ProgramOp& op : program_.ops) {
      if (op.iteration != iteration) start_iteration(iteration = op.iteration);
      if (!initialised && op.phase != core::Phase::init) {
        initialised = true;
        fsdp_.free_after_construction();
        fsdp2_.free_after_construction();
      }
      const double start = seconds();
      run_named(op);
      record.timing.timings[op.id] = {start, start, seconds()};
    }
    record.timing.wall_seconds = seconds();
    fsdp_.gather_state_dict();
    fsdp2_.gather_state_dict();
    train::check_parity(state_);
    state_.backend.barrier();
    return std::move(record);
  }

 private:
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
    const std::int64_t first = state_.dp_position * state_.replica_rows;
    Tensor input{train::input_rows(state_.options.seed, iteration, first, state_.replica_rows, model_.input_features),
                 Placement::replicate(), state_.sequence > 0 ? state_.replica_sequences : 0};
    const Placement placement = state_.planned.input_placement;
    act_ = placement.is_shard() ? train::chunk_of(input, placement.dim, state_.tp, state_.tp_position) : input;
    act_.placement = placement;
  }

  // The loss is F.mse_loss over the global batch. A rank seeds the gradient of its block of the
  // output scaled by 1 / (replica rows x features): the data-parallel average then divides by the
  // replica count, giving exactly the global mean's gradient.
  void seed_loss() {
    loss_seeded_ = true;
    const Placement placement = act_.placement;
    if (placement.is_partial())
      throw std::runtime_error("the model output is Partial(): the program never reduced it, so there is no loss");
    const std::int64_t first = state_.dp_position * state_.replica_rows;
    Matrix target =
        train::target_rows(state_.options.seed, iteration_, first, state_.replica_rows, state_.output_features);
    if (placement.is_shard())
      target = train::chunk_of({std::move(target), placement, act_.sequences > 0 ? state_.replica_sequences : 0},
                               placement.dim, state_.tp, state_.tp_position)
                   .value;
    if (target.rows() != act_.value.rows() || target.cols() != act_.value.cols())
      throw std::runtime_error(fmt::format("the model output is {}x{} on this rank, the loss expects {}x{}",
                                           act_.value.rows(), act_.value.cols(), target.rows(), target.cols()));
    if (owns_loss_share(placement)) {
      if (static_cast<int>(state_.record.squared_error.size()) < iteration_)
        state_.record.squared_error.resize(iteration_, 0.0);
      state_.record.squared_error[iteration_ - 1] += train::squared_error(act_.value, target);
    }
    const double scale = 1.0 / (static_cast<double>(state_.replica_rows) * static_cast<double>(state_.output_features));
    grad_ = {train::squared_error_grad(act_.value, target, scale), placement, act_.sequences};
  }

  // Exactly one rank reports each element of the global loss: coordinate 0 on every mesh dim
  // that does not split the output.
  bool owns_loss_share(Placement output) const {
    const std::vector<int> coordinate = program_.mesh.coordinate(state_.rank);
    for (int d = 0; d < program_.mesh.ndim(); ++d) {
      const bool data = std::find(state_.data_dims.begin(), state_.data_dims.end(), d) != state_.data_dims.end();
      const bool split =
          output.is_shard() && std::find(state_.tp_dims.begin(), state_.tp_dims.end(), d) != state_.tp_dims.end();
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
    } catch (const train::OpFailure&) {
      throw;
    } catch (const CommError&) {
      throw;
    } catch (const core::InputError&) {
      throw;
    } catch (const std::exception& error) {
      throw train::OpFailure(fmt::format("op {} \"{}\": {}", op.id, op.name, error.what()));
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
        return ddp_.param_count(op);
      case OpRole::ddp_param_shapes:
        return ddp_.param_shapes(op);
      case OpRole::ddp_module_states:
        return train::broadcast_module_states(state_, op);
      case OpRole::fsdp_module_states:
        train::broadcast_module_states(state_, op);
        return fsdp_.refresh_shards();
      case OpRole::ddp_bucket_indices:
      case OpRole::ddp_bucket_sizes:
        return ddp_.bucket_layout(op);
      case OpRole::ddp_used_map:
        return ddp_.used_map(op);
      case OpRole::ddp_bucket:
        return ddp_.bucket(op);
      case OpRole::fsdp_unshard:
        return fsdp2_.owns(op) ? fsdp2_.unshard(op) : fsdp_.unshard(op);
      case OpRole::fsdp_reduce_grad:
        return fsdp2_.owns(op) ? fsdp2_.reduce_grad(op) : fsdp_.reduce_grad(op);
      case OpRole::fsdp_replicate_grad:
        return fsdp2_.owns(op) ? fsdp2_.replicate_grad(op) : fsdp_.replicate_grad(op);
      case OpRole::tp_input:
      case OpRole::tp_output:
        return dtensor_.redistribute_op(op, act_);
      case OpRole::tp_grad_input:
      case OpRole::tp_grad_output:
        return dtensor_.redistribute_op(op, grad_);
      case OpRole::tp_param_grad:
        return dtensor_.sum_partial_grad(op);
      case OpRole::tp_distribute:
        dtensor_.distribute(op);
        fsdp2_.refresh_shards();
        return fsdp_.refresh_shards();
      case OpRole::fsdp2_copy:
        // The gathers and reductions above move the values these kernels copy.
        return;
      case OpRole::clip_grad_norm:
      case OpRole::grad_scaler:
        // Refused before the run (train_unsupported_reason).
      case OpRole::none:
        break;
    }
    throw std::runtime_error("the op says nothing about what it acts on (a program without roles?)");
  }

  // ---- compute

  std::vector<const Matrix*> module_params(const core::Module& module) const {
    std::vector<const Matrix*> out;
    for (int p : module.params) out.push_back(&state_.params[p]);
    return out;
  }

  void run_leaf(const core::ProgramOp& op) {
    const int m = model_.find_module(op.module);
    if (m < 0) throw std::runtime_error(fmt::format("unknown module \"{}\"", op.module));
    if (op.phase == core::Phase::backward) return leaf_backward(op, m);
    if (op.phase == core::Phase::recompute) return leaf_recompute(op, m);
    leaf_forward(op, m);
  }

  void leaf_forward(const core::ProgramOp& op, int m) {
    dtensor_.enter_boundaries(op, m, act_);
    const core::Module& module = model_.modules[m];
    const Style style = dtensor_.style_of(module);
    Placement out;
    float bias_scale = 1.0f;
    const Placement features = Placement::shard(act_.last_dim());
    if (style == Style::rowwise) {
      state_.expect(op, act_.placement == features, "RowwiseParallel needs its input Shard(-1)");
      out = Placement::partial();
      bias_scale = 1.0f / static_cast<float>(state_.tp);
    } else if (style == Style::colwise) {
      state_.expect(op, act_.placement.is_replicate(), "ColwiseParallel needs its input Replicate()");
      out = features;
    } else {
      // Leaves act on rows (samples, positions), so any split but the features' is theirs.
      const bool rows_only = act_.placement.is_replicate() || (act_.placement.is_shard() && act_.placement != features);
      state_.expect(op, core::is_elementwise(module.leaf) ? !act_.placement.is_partial() : rows_only,
                    fmt::format("a {} cannot run on a {} activation", module.type, act_.placement.str()));
      out = act_.placement;
    }
    const std::vector<const Matrix*> params = module_params(module);
    Matrix y = train::leaf_forward(module, params, act_.value, bias_scale);
    saved_[m] = {std::move(act_.value), act_.placement, out};
    act_ = {std::move(y), out, act_.sequences};
    fsdp_.after_forward_step(m);
    fsdp2_.after_forward_step(m);
  }

  // Recomputation is deterministic: the saved input already holds what it would produce. The
  // op still does its real work so timings stay honest.
  void leaf_recompute(const core::ProgramOp& op, int m) {
    auto it = saved_.find(m);
    if (it == saved_.end()) return;
    const core::Module& module = model_.modules[m];
    for (int p : module.params)
      state_.expect(op, !state_.params[p].hasNaN(),
                    fmt::format("recomputes with {} freed (no all-gather before it)", model_.params[p].fqn));
    const float bias_scale = dtensor_.style_of(module) == Style::rowwise ? 1.0f / static_cast<float>(state_.tp) : 1.0f;
    (void)train::leaf_forward(module, module_params(module), it->second.input, bias_scale);
  }

  void leaf_backward(const core::ProgramOp& op, int m) {
    auto it = saved_.find(m);
    if (it == saved_.end()) throw std::runtime_error(fmt::format("backward before forward"));
    const Saved& saved = it->second;
    const core::Module& module = model_.modules[m];
    // The gradient comes back in the output's placement (a Partial output's gradient is Replicate).
    const Placement expected = saved.output_placement.is_partial() ? Placement::replicate() : saved.output_placement;
    dtensor_.localize(grad_, expected);
    state_.expect(op, grad_.placement == expected,
                  fmt::format("the gradient of its output is {}, expected {}", grad_.placement.str(), expected.str()));
    std::vector<Matrix*> grads;
    for (int p : module.params) grads.push_back(dtensor_.grad_target(p));
    Matrix grad_x = train::leaf_backward(module, module_params(module), saved.input, grad_.value, grads);
    const Style style = dtensor_.style_of(module);
    const Placement placement = style == Style::colwise ? Placement::partial() : saved.input_placement;
    grad_ = {std::move(grad_x), placement, grad_.sequences};
  }

  void run_param_matmul(const core::ProgramOp& op) {
    if (op.params.empty()) throw std::runtime_error(fmt::format("no parameter"));
    const int p = state_.param_of(op.params.front());
    if (op.phase == core::Phase::recompute) return;
    if (op.phase == core::Phase::forward) {
      state_.expect(op,
                    act_.placement.is_replicate() ||
                        (act_.placement.is_shard() && act_.placement != Placement::shard(act_.last_dim())),
                    fmt::format("torch.mm needs rows-only sharding, the activation is {}", act_.placement.str()));
      Matrix y = train::param_matmul_forward(state_.params[p], act_.value);
      saved_matmul_[p] = {std::move(act_.value), act_.placement, act_.placement};
      act_.value = std::move(y);
      fsdp_.after_forward_step(-(p + 1));
      fsdp2_.after_forward_step(-(p + 1));
      return;
    }
    const Saved& saved = saved_matmul_.at(p);
    dtensor_.localize(grad_, saved.output_placement);
    state_.expect(op, grad_.placement == saved.output_placement, "the gradient's placement differs from the output's");
    Matrix* grad_p = dtensor_.grad_target(p);
    grad_.value = train::param_matmul_backward(state_.params[p], saved.input, grad_.value, grad_p);
  }

  // ---- optimizer

  void optimizer_step() {
    for (std::size_t p = 0; p < state_.params.size(); ++p) {
      if (!model_.params[p].requires_grad || fsdp_.holds(static_cast<int>(p)) || fsdp2_.holds(static_cast<int>(p)))
        continue;
      train::optimizer_step(state_.plan.optimizer, train::span_of(state_.params[p]), train::span_of(state_.grads[p]),
                            param_optimizer_[p]);
    }
    fsdp_.optimizer_step();
    fsdp2_.optimizer_step();
    for (Matrix& grad : state_.grads) grad.setZero();  // zero_grad(set_to_none=True)
  }

  train::RankState state_;
  const core::Model& model_;
  const core::Program& program_;
  train::DdpReplicas ddp_;
  train::FsdpUnits fsdp_;
  train::Fsdp2Groups fsdp2_;
  train::DtensorLayouts dtensor_;
  std::vector<train::OptimizerState> param_optimizer_;  // parameters no FSDP unit holds

  int iteration_ = 0;
  bool loss_seeded_ = false;
  Tensor act_, grad_;
  std::map<int, Saved> saved_, saved_matmul_;
  Clock::time_point origin_;
};

}  // namespace

TrainRecord run_training(const core::Model& model, const core::Plan& plan, const core::PlanResult& planned,
                         Backend& backend, const TrainOptions& options) {
  const std::string why = train_unsupported_reason(model, plan, planned);
  if (!why.empty()) throw core::InputError(why);
  return Trainer(model, plan, planned, backend, options).run();
}

}  // namespace stratsim::exec
