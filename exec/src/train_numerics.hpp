// Real fp32 numerics for `stratsim run --train`: parameter initialisation, the synthetic data
// set, forward and backward of the supported leaf modules, the MSE loss, the optimizers, and the
// single-process reference training every distributed run is checked against.
//
// Everything here is deterministic: the same seed gives the same bits on every rank, which is
// what lets each rank compute the local reference itself and compare its own slice of the
// parameters without shipping tensors around. Formulas follow PyTorch's eager kernels
// (torch.nn.Linear, F.rms_norm as RMSNormPython writes it, torch.optim single-tensor paths).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "stratsim/core/model.hpp"
#include "stratsim/core/plan.hpp"

namespace stratsim::exec::train {

// Activations are [rows, features]; a 1-D parameter is a 1 x n matrix; a Linear weight is
// [out_features, in_features] as in PyTorch.
using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Why the model cannot be trained (a leaf type without numerics here, token or sequence input,
// dropout), or "" when it can. The CLI turns a reason into exit code 2.
std::string unsupported_reason(const core::Model& model);

// Deterministic initial values of every model parameter (model.params order, full shapes):
// Linear weight and bias U(-1/sqrt(in), 1/sqrt(in)) as nn.Linear's reset_parameters bounds them,
// norm weights 1 and biases 0, other parameters U(-1/sqrt(shape[0]), 1/sqrt(shape[0])). Values come
// from a counter-based generator keyed by (seed, parameter index, element index), so they do not
// depend on the order anything is initialised in.
std::vector<Matrix> init_parameters(const core::Model& model, std::uint64_t seed);

// Row `row` of the global batch of micro-step `iteration` (1-based): inputs U(-1, 1) of
// `features` columns and targets U(-1, 1) of `outputs` columns. Counter-based as above: a rank
// generates exactly its own rows.
Matrix input_rows(std::uint64_t seed, int iteration, std::int64_t first_row, std::int64_t rows, std::int64_t features);
Matrix target_rows(std::uint64_t seed, int iteration, std::int64_t first_row, std::int64_t rows, std::int64_t outputs);

// One leaf module's forward on `x`. `params` are the module's own parameters in
// module.params order (local shards under tensor parallelism: the shapes say what to do).
// `bias_scale` multiplies a Linear's bias: 1/tp for RowwiseParallel, whose partial sums are
// reduced after the bias is added (DTensor partitions a Replicate bias onto a Partial output
// by dividing it).
Matrix leaf_forward(const core::Module& module, std::span<const Matrix* const> params, const Matrix& x,
                    float bias_scale = 1.0f);

// Backward of leaf_forward: returns the gradient of the input and ADDS the parameters' gradients
// into `grads` (same order and shapes as `params`; a null entry skips that gradient). The bias
// gradient is the unscaled column sum of grad_y (DTensor's Replicate->Partial backward moves the
// gradient without scaling it).
Matrix leaf_backward(const core::Module& module, std::span<const Matrix* const> params, const Matrix& x,
                     const Matrix& grad_y, std::span<Matrix* const> grads);

// torch.mm(x, p) for a container's own 2-D parameter, and its backward (grad_p += x^T g).
Matrix param_matmul_forward(const Matrix& p, const Matrix& x);
Matrix param_matmul_backward(const Matrix& p, const Matrix& x, const Matrix& grad_y, Matrix* grad_p);

// Sum of squared errors of a block of the output, and its gradient scaled by `scale`
// (2 (y - t) * scale). With scale = 1 / (rows x features) of the whole batch this is
// F.mse_loss(reduction="mean")'s gradient restricted to the block.
double squared_error(const Matrix& y, const Matrix& t);
Matrix squared_error_grad(const Matrix& y, const Matrix& t, double scale);

// Optimizer state of one tensor (a parameter, a TP shard or an FSDP flat shard). Updates are
// element-wise, so a shard updated on its own gets exactly the elements the whole tensor would.
struct OptimizerState {
  int step = 0;
  std::vector<float> momentum_buffer, exp_avg, exp_avg_sq, max_exp_avg_sq;
};

// One torch.optim step (single-tensor path, fp32): SGD (momentum, dampening 0, nesterov off,
// weight_decay added to the gradient), Adam (betas 0.9/0.999, eps 1e-8, L2 weight decay, amsgrad)
// and AdamW (decoupled weight decay). `param` and `grad` have equal sizes.
void optimizer_step(const core::OptimizerConfig& config, std::span<float> param, std::span<const float> grad,
                    OptimizerState& state);

// Single-process training on the global batch: the reference of every parity check.
struct ReferenceRun {
  std::vector<Matrix> params;  // after the last micro-step, model.params order
  std::vector<std::vector<Matrix>>
      grads;                   // per micro-step: the accumulated gradient before that step's optimizer (if any)
  std::vector<double> losses;  // per micro-step: F.mse_loss(mean) on the global batch
};

// Runs `iterations` micro-steps of `global_rows` rows each; the optimizer steps after the
// micro-steps listed in `optimizer_after` (1-based; gradients accumulate in between and are zeroed
// after each step, as zero_grad(set_to_none=True)). Loss: mean squared error over all rows and
// output features. `record_grads` = false leaves ReferenceRun::grads empty (a copy of every
// gradient per micro-step the parity check does not need).
ReferenceRun train_reference(const core::Model& model, const core::OptimizerConfig& optimizer, std::uint64_t seed,
                             int iterations, std::int64_t global_rows, const std::vector<int>& optimizer_after,
                             bool record_grads = true);

// The model's output width: the running width after the forward (Linear sets out_features, a
// parameter matmul its parameter's columns), starting from input_features.
std::int64_t output_features(const core::Model& model);

}  // namespace stratsim::exec::train
