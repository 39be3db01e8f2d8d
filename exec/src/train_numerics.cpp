// Real fp32 numerics for `stratsim run --train` (see train_numerics.hpp for the contracts).
//
// Element-wise formulas are written out in PyTorch's operation order and without fused
// multiply-adds, so a shard, a rank or a re-run computes the same bits for the same element.
// Row statistics of the norms are accumulated in double: they are exact enough to be the
// reference, and a row's result does not depend on how many other rows the matrix has.
#include "train_numerics.hpp"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <stdexcept>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace stratsim::exec::train {
namespace {

using core::ForwardStep;
using core::LeafKind;
using core::Model;
using core::Module;
using core::Parameter;
using Index = Eigen::Index;

constexpr float kRmsNormEps = 1e-6f;    // RMSNormPython's default
constexpr float kLayerNormEps = 1e-5f;  // nn.LayerNorm's default
constexpr double kAdamBeta1 = 0.9, kAdamBeta2 = 0.999, kAdamEps = 1e-8;

void require(bool condition, const char* what) {
  if (!condition) throw std::invalid_argument(std::string("train numerics: ") + what);
}

// ---- Counter-based generator ----------------------------------------------------------------

// Streams keep parameters, inputs and targets apart even where their counters coincide.
enum class Stream : std::uint64_t { parameter = 1, input = 2, target = 3 };

constexpr std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Each field is mixed into the state in turn, so the hash depends on the fields' order.
std::uint64_t hash_key(std::initializer_list<std::uint64_t> fields) {
  std::uint64_t h = 0;
  for (std::uint64_t field : fields) h = splitmix64(h ^ field);
  return h;
}

// U[-bound, bound) from the top 24 bits: k in [-2^23, 2^23) times bound * 2^-23 (exact scaling),
// one rounding in all, which cannot reach +bound.
float uniform(std::uint64_t h, float bound) {
  const auto k = static_cast<std::int32_t>(h >> 40) - (1 << 23);
  return static_cast<float>(k) * (bound * 0x1p-23f);
}

Matrix data_rows(Stream stream, std::uint64_t seed, int iteration, std::int64_t first_row, std::int64_t rows,
                 std::int64_t cols) {
  require(rows >= 0 && cols >= 0 && first_row >= 0, "negative row or column count");
  Matrix m(rows, cols);
  for (Index r = 0; r < rows; ++r)
    for (Index c = 0; c < cols; ++c)
      m(r, c) = uniform(hash_key({seed, static_cast<std::uint64_t>(stream), static_cast<std::uint64_t>(iteration),
                                  static_cast<std::uint64_t>(first_row + r), static_cast<std::uint64_t>(c)}),
                        1.0f);
  return m;
}

// ---- Parameters ------------------------------------------------------------------------------

// 0-D -> 1 x 1, 1-D -> 1 x n, 2-D as is; more dimensions (refused by unsupported_reason) fold into columns.
Matrix shaped_zeros(const Parameter& p) {
  if (p.shape.empty()) return Matrix::Zero(1, 1);
  if (p.shape.size() == 1) return Matrix::Zero(1, p.shape[0]);
  std::int64_t cols = 1;
  for (std::size_t d = 1; d < p.shape.size(); ++d) cols *= p.shape[d];
  return Matrix::Zero(p.shape[0], cols);
}

bool is_norm(LeafKind kind) { return kind == LeafKind::rms_norm || kind == LeafKind::layer_norm; }

// nn.Linear bounds weight and bias by 1/sqrt(fan_in); anything else by its first extent.
float init_bound(const Model& model, const Parameter& p) {
  const Module& owner = model.modules[p.module];
  const std::int64_t fan = owner.leaf == LeafKind::linear ? owner.in_features : (p.shape.empty() ? 1 : p.shape[0]);
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan)));
}

// ---- Leaves ----------------------------------------------------------------------------------

const Matrix& param_at(std::span<const Matrix* const> params, std::size_t i) {
  require(i < params.size() && params[i] != nullptr, "a leaf is missing a parameter");
  return *params[i];
}

Matrix* grad_at(std::span<Matrix* const> grads, std::size_t i) { return i < grads.size() ? grads[i] : nullptr; }

Matrix linear_forward(std::span<const Matrix* const> params, const Matrix& x, float bias_scale) {
  const Matrix& w = param_at(params, 0);
  require(x.cols() == w.cols(), "Linear input width differs from the weight's in_features");
  Matrix y(x.rows(), w.rows());
  y.noalias() = x * w.transpose();
  if (params.size() > 1) {
    const Matrix& b = param_at(params, 1);
    require(b.size() == w.rows(), "Linear bias size differs from the weight's out_features");
    y.rowwise() += bias_scale * b.row(0);
  }
  return y;
}

Matrix linear_backward(std::span<const Matrix* const> params, const Matrix& x, const Matrix& g,
                       std::span<Matrix* const> grads) {
  const Matrix& w = param_at(params, 0);
  Matrix gx(g.rows(), w.cols());
  gx.noalias() = g * w;
  if (Matrix* gw = grad_at(grads, 0)) gw->noalias() += g.transpose() * x;
  if (Matrix* gb = params.size() > 1 ? grad_at(grads, 1) : nullptr) *gb += g.colwise().sum();
  return gx;
}

float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

// at::gelu (approximate='none'): x * 0.5 * (1 + erf(x / sqrt(2))).
float gelu(float v) { return v * 0.5f * (1.0f + std::erf(v * static_cast<float>(M_SQRT1_2))); }

float gelu_grad(float v) {
  constexpr float kBeta = static_cast<float>(M_2_SQRTPI * M_SQRT1_2 * 0.5);  // 1 / sqrt(2 pi)
  const float cdf = 0.5f * (1.0f + std::erf(v * static_cast<float>(M_SQRT1_2)));
  const float pdf = std::exp(-0.5f * v * v) * kBeta;
  return cdf + v * pdf;
}

// Applies f(x) element-wise, or f(x, g) for a backward.
template <typename F>
Matrix elementwise(const Matrix& x, F f) {
  return x.unaryExpr(f);
}
template <typename F>
Matrix elementwise(const Matrix& x, const Matrix& g, F f) {
  require(x.rows() == g.rows() && x.cols() == g.cols(), "gradient shape differs from the input's");
  return x.binaryExpr(g, f);
}

// The norms' optional affine parameters: the module's own, else the width of x (elementwise_affine=False).
const float* norm_weight(std::span<const Matrix* const> params, Index width) {
  if (params.empty()) return nullptr;
  require(param_at(params, 0).size() == width, "norm weight size differs from the input width");
  return param_at(params, 0).data();
}
const float* norm_bias(std::span<const Matrix* const> params, Index width) {
  if (params.size() < 2) return nullptr;
  require(param_at(params, 1).size() == width, "norm bias size differs from the input width");
  return param_at(params, 1).data();
}

// torch.rsqrt(x.pow(2).mean(-1) + eps) of one row.
float rms_inverse(const float* row, Index n) {
  double sum = 0;
  for (Index c = 0; c < n; ++c) sum += static_cast<double>(row[c] * row[c]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  return 1.0f / std::sqrt(mean + kRmsNormEps);
}

Matrix rms_norm_forward(std::span<const Matrix* const> params, const Matrix& x) {
  const Index n = x.cols();
  const float* w = norm_weight(params, n);
  Matrix y(x.rows(), n);
  for (Index r = 0; r < x.rows(); ++r) {
    const float inv = rms_inverse(&x(r, 0), n);
    for (Index c = 0; c < n; ++c) y(r, c) = w ? (x(r, c) * inv) * w[c] : x(r, c) * inv;
  }
  return y;
}

// y = x r w with r = (mean(x^2) + eps)^-1/2 and dr/dx_j = -r^3 x_j / n, so with h = g w:
// dx_j = r h_j - r^3 x_j (h . x) / n and dw_j = sum over rows of g_j x_j r.
Matrix rms_norm_backward(std::span<const Matrix* const> params, const Matrix& x, const Matrix& g,
                         std::span<Matrix* const> grads) {
  const Index n = x.cols();
  const float* w = norm_weight(params, n);
  Matrix* gw = w ? grad_at(grads, 0) : nullptr;
  std::vector<double> dw(gw ? n : 0, 0.0);
  Matrix gx(x.rows(), n);
  for (Index r = 0; r < x.rows(); ++r) {
    const double inv = rms_inverse(&x(r, 0), n);
    double hx = 0;
    for (Index c = 0; c < n; ++c) hx += static_cast<double>(g(r, c)) * (w ? w[c] : 1.0f) * x(r, c);
    const double coef = inv * inv * inv * hx / static_cast<double>(n);
    for (Index c = 0; c < n; ++c) {
      const double h = static_cast<double>(g(r, c)) * (w ? w[c] : 1.0f);
      gx(r, c) = static_cast<float>(inv * h - coef * x(r, c));
      if (gw) dw[c] += static_cast<double>(g(r, c)) * x(r, c) * inv;
    }
  }
  for (Index c = 0; c < static_cast<Index>(dw.size()); ++c) (*gw)(0, c) += static_cast<float>(dw[c]);
  return gx;
}

// Mean and 1/sqrt(biased variance + eps) of one row.
std::pair<double, double> row_moments(const float* row, Index n) {
  double sum = 0;
  for (Index c = 0; c < n; ++c) sum += row[c];
  const double mean = sum / static_cast<double>(n);
  double squares = 0;
  for (Index c = 0; c < n; ++c) squares += (row[c] - mean) * (row[c] - mean);
  return {mean, 1.0 / std::sqrt(squares / static_cast<double>(n) + kLayerNormEps)};
}

Matrix layer_norm_forward(std::span<const Matrix* const> params, const Matrix& x) {
  const Index n = x.cols();
  const float* w = norm_weight(params, n);
  const float* b = norm_bias(params, n);
  Matrix y(x.rows(), n);
  for (Index r = 0; r < x.rows(); ++r) {
    const auto [mean, rstd] = row_moments(&x(r, 0), n);
    const auto mean_f = static_cast<float>(mean), rstd_f = static_cast<float>(rstd);
    for (Index c = 0; c < n; ++c) {
      float v = (x(r, c) - mean_f) * rstd_f;
      if (w) v = v * w[c];
      if (b) v = v + b[c];
      y(r, c) = v;
    }
  }
  return y;
}

// With xhat = (x - mean) rstd and h = g w: dx = rstd (h - mean(h) - xhat mean(h xhat)),
// dw = sum over rows of g xhat, db = sum over rows of g.
Matrix layer_norm_backward(std::span<const Matrix* const> params, const Matrix& x, const Matrix& g,
                           std::span<Matrix* const> grads) {
  const Index n = x.cols();
  const float* w = norm_weight(params, n);
  Matrix* gw = w ? grad_at(grads, 0) : nullptr;
  Matrix* gb = norm_bias(params, n) ? grad_at(grads, 1) : nullptr;
  std::vector<double> dw(gw ? n : 0, 0.0), db(gb ? n : 0, 0.0), xhat(n), h(n);
  Matrix gx(x.rows(), n);
  for (Index r = 0; r < x.rows(); ++r) {
    const auto [mean, rstd] = row_moments(&x(r, 0), n);
    double h_mean = 0, hx_mean = 0;
    for (Index c = 0; c < n; ++c) {
      xhat[c] = (x(r, c) - mean) * rstd;
      h[c] = static_cast<double>(g(r, c)) * (w ? w[c] : 1.0f);
      h_mean += h[c];
      hx_mean += h[c] * xhat[c];
      if (gw) dw[c] += g(r, c) * xhat[c];
      if (gb) db[c] += g(r, c);
    }
    h_mean /= static_cast<double>(n);
    hx_mean /= static_cast<double>(n);
    for (Index c = 0; c < n; ++c) gx(r, c) = static_cast<float>(rstd * (h[c] - h_mean - xhat[c] * hx_mean));
  }
  for (Index c = 0; c < static_cast<Index>(dw.size()); ++c) (*gw)(0, c) += static_cast<float>(dw[c]);
  for (Index c = 0; c < static_cast<Index>(db.size()); ++c) (*gb)(0, c) += static_cast<float>(db[c]);
  return gx;
}

[[noreturn]] void no_numerics(const Module& module) {
  throw std::invalid_argument(
      fmt::format("train numerics: module \"{}\" ({}) has no training numerics", module.fqn, module.type));
}

// ---- Checks ----------------------------------------------------------------------------------

bool trainable_leaf(LeafKind kind) {
  switch (kind) {
    case LeafKind::container:
    case LeafKind::linear:
    case LeafKind::relu:
    case LeafKind::sigmoid:
    case LeafKind::tanh:
    case LeafKind::silu:
    case LeafKind::gelu:
    case LeafKind::identity:
    case LeafKind::rms_norm:
    case LeafKind::layer_norm:
      return true;
    default:
      return false;
  }
}

std::string module_label(const Model& model, int index) {
  const Module& m = model.modules[index];
  return fmt::format("module \"{}\"", m.fqn.empty() ? model.name : m.fqn);
}

std::string article(const std::string& word) {
  return !word.empty() && std::string_view("AEIOUaeiou").find(word.front()) != std::string_view::npos ? "an" : "a";
}

std::string shape_text(const std::vector<std::int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::string parameter_reason(const Parameter& p) {
  if (p.dtype != core::DType::float32)
    return fmt::format("parameter \"{}\" is {}; --train computes in float32 only", p.fqn, core::dtype_name(p.dtype));
  if (p.shape.size() > 2)
    return fmt::format("parameter \"{}\" has shape {}; --train supports parameters of at most 2 dimensions", p.fqn,
                       shape_text(p.shape));
  return "";
}

// Follows the forward order and checks every layer receives the width it expects (widths the
// shapes fix: Linear in_features, norm dim, a parameter matmul's rows).
class WidthCheck {
 public:
  explicit WidthCheck(const Model& model) : model_(model) {}

  std::string run() {
    width_ = model_.input_features;
    for (const ForwardStep& step : core::flat_forward(model_)) {
      std::string reason = step.kind == ForwardStep::Kind::child ? leaf(step.index)
                                                                 : matmul(model_.params[step.index].module, step.index);
      if (!reason.empty()) return reason;
    }
    return "";
  }

 private:
  const Model& model_;
  std::int64_t width_ = 0;

  std::string leaf(int index) {
    const Module& m = model_.modules[index];
    const std::int64_t expected = m.leaf == LeafKind::linear ? m.in_features : is_norm(m.leaf) ? m.dim : width_;
    if (expected != width_) return mismatch(index, expected);
    if (m.leaf == LeafKind::linear) width_ = m.out_features;
    return "";
  }

  std::string matmul(int index, int param) {
    const Parameter& p = model_.params[param];
    if (p.shape.size() != 2)
      return fmt::format("{} multiplies by parameter \"{}\" of shape {}; a parameter matmul needs a 2-D parameter",
                         module_label(model_, index), p.fqn, shape_text(p.shape));
    if (p.shape[0] != width_) return mismatch(index, p.shape[0]);
    width_ = p.shape[1];
    return "";
  }

  std::string mismatch(int index, std::int64_t expected) const {
    return fmt::format("{} expects {} input features but receives {}", module_label(model_, index), expected, width_);
  }
};

// ---- Optimizers ------------------------------------------------------------------------------

// _single_tensor_sgd: g += wd p; buf = g (first step) or momentum buf + g; p += -lr g.
void sgd_step(const core::OptimizerConfig& config, std::span<float> param, std::span<const float> grad,
              OptimizerState& state) {
  const float lr = static_cast<float>(config.lr), wd = static_cast<float>(config.weight_decay);
  const float momentum = static_cast<float>(config.momentum);
  const bool use_momentum = config.momentum != 0.0;
  const bool first = state.momentum_buffer.empty();
  if (use_momentum && first) state.momentum_buffer.resize(param.size());
  require(!use_momentum || state.momentum_buffer.size() == param.size(), "momentum buffer size differs");
  for (std::size_t i = 0; i < param.size(); ++i) {
    float d = grad[i];
    if (config.weight_decay != 0.0) d = d + wd * param[i];
    if (use_momentum) {
      float& buf = state.momentum_buffer[i];
      buf = first ? d : buf * momentum + d;
      d = buf;
    }
    param[i] = param[i] + -lr * d;
  }
  ++state.step;  // torch.optim.SGD keeps no step; counting it does no harm
}

// The python-float scalars of _single_tensor_adam(w) for this step, rounded to float where the
// tensor ops use them.
struct AdamScalars {
  float neg_step_size, bias_correction2_sqrt, one_minus_beta1, beta2, one_minus_beta2, eps, l2, decay;
};

AdamScalars adam_scalars(const core::OptimizerConfig& config, int step) {
  const double bias_correction1 = 1.0 - std::pow(kAdamBeta1, step);
  const double bias_correction2 = 1.0 - std::pow(kAdamBeta2, step);
  const bool decoupled = config.kind == core::OptimizerKind::adamw;
  return {static_cast<float>(-(config.lr / bias_correction1)),
          static_cast<float>(std::sqrt(bias_correction2)),
          static_cast<float>(1.0 - kAdamBeta1),
          static_cast<float>(kAdamBeta2),
          static_cast<float>(1.0 - kAdamBeta2),
          static_cast<float>(kAdamEps),
          decoupled ? 0.0f : static_cast<float>(config.weight_decay),
          decoupled ? static_cast<float>(1.0 - config.lr * config.weight_decay) : 1.0f};
}

void adam_step(const core::OptimizerConfig& config, std::span<float> param, std::span<const float> grad,
               OptimizerState& state) {
  const std::size_t n = param.size();
  if (state.exp_avg.empty() && state.exp_avg_sq.empty()) {  // torch initialises the state with zeros
    state.exp_avg.assign(n, 0.0f);
    state.exp_avg_sq.assign(n, 0.0f);
  }
  if (config.amsgrad && state.max_exp_avg_sq.empty()) state.max_exp_avg_sq.assign(n, 0.0f);
  require(state.exp_avg.size() == n && state.exp_avg_sq.size() == n, "Adam state size differs");
  require(!config.amsgrad || state.max_exp_avg_sq.size() == n, "Adam state size differs");
  const AdamScalars s = adam_scalars(config, ++state.step);
  const bool decoupled = config.kind == core::OptimizerKind::adamw;
  const bool l2 = !decoupled && config.weight_decay != 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    float p = decoupled ? param[i] * s.decay : param[i];  // param.mul_(1 - lr * weight_decay)
    float g = l2 ? grad[i] + s.l2 * p : grad[i];          // grad.add(param, alpha=weight_decay)
    float& m = state.exp_avg[i];
    m = m + s.one_minus_beta1 * (g - m);  // lerp_(grad, 1 - beta1), weight < 0.5
    float& v = state.exp_avg_sq[i];
    v = v * s.beta2;                    // mul_(beta2)
    v = v + s.one_minus_beta2 * g * g;  // addcmul_(grad, grad, value=1 - beta2)
    float second = v;
    if (config.amsgrad) second = state.max_exp_avg_sq[i] = std::max(state.max_exp_avg_sq[i], v);
    const float denom = std::sqrt(second) / s.bias_correction2_sqrt + s.eps;
    param[i] = p + s.neg_step_size * m / denom;  // addcdiv_(exp_avg, denom, value=-step_size)
  }
}

// ---- Reference training ----------------------------------------------------------------------

// The whole model's forward as a tape of (leaf or parameter matmul, saved input), and its
// backward in reverse tape order.
class ModelRunner {
 public:
  ModelRunner(const Model& model, const std::vector<Matrix>& params) : model_(model), params_(params) {}

  Matrix forward(Matrix x) {
    tape_.clear();
    for (const ForwardStep& step : core::flat_forward(model_)) {
      const bool matmul = step.kind == ForwardStep::Kind::param_matmul;
      Matrix y = matmul ? param_matmul_forward(params_[step.index], x)
                        : leaf_forward(model_.modules[step.index], module_params(model_.modules[step.index]), x);
      tape_.push_back({matmul, step.index, std::move(x)});
      x = std::move(y);
    }
    return x;
  }

  // Adds every parameter gradient into `grads` (null: no gradient) and marks it in `reached`.
  void backward(Matrix g, std::span<Matrix* const> grads, std::vector<bool>& reached) {
    for (auto it = tape_.rbegin(); it != tape_.rend(); ++it) {
      if (it->matmul) {
        reached[it->index] = true;
        g = param_matmul_backward(params_[it->index], it->input, g, grads[it->index]);
        continue;
      }
      const Module& m = model_.modules[it->index];
      std::vector<Matrix*> module_grads;
      for (int p : m.params) {
        reached[p] = true;
        module_grads.push_back(grads[p]);
      }
      g = leaf_backward(m, module_params(m), it->input, g, module_grads);
    }
    tape_.clear();
  }

 private:
  struct Entry {
    bool matmul;
    int index;  // module (leaf) or parameter (matmul)
    Matrix input;
  };
  const Model& model_;
  const std::vector<Matrix>& params_;
  std::vector<Entry> tape_;

  std::vector<const Matrix*> module_params(const Module& m) const {
    std::vector<const Matrix*> out;
    for (int p : m.params) out.push_back(&params_[p]);
    return out;
  }
};

void zero(std::vector<Matrix>& grads) {
  for (Matrix& g : grads) g.setZero();
}

}  // namespace

std::string unsupported_reason(const core::Model& model) {
  const std::string prefix = fmt::format("model {}: ", model.name);
  for (int i = 0; i < static_cast<int>(model.modules.size()); ++i) {
    const Module& m = model.modules[i];
    if (m.graph)
      return prefix + fmt::format("{}'s forward names tensors (branches and joins); --train runs chain forwards only",
                                  module_label(model, i));
    if (!trainable_leaf(m.leaf))
      return prefix + fmt::format(
                          "{} is {} {}; --train supports Linear, ReLU, Sigmoid, Tanh, SiLU, GELU, Identity, "
                          "RMSNorm, LayerNorm and parameter matmuls",
                          module_label(model, i), article(m.type), m.type);
  }
  for (const Parameter& p : model.params)
    if (std::string reason = parameter_reason(p); !reason.empty()) return prefix + reason;
  if (model.token_input)
    return prefix + "its input is token ids; --train needs a [batch, features] or [batch, seq, features] float input";
  if (std::string reason = WidthCheck(model).run(); !reason.empty()) return prefix + reason;
  return "";
}

std::vector<Matrix> init_parameters(const core::Model& model, std::uint64_t seed) {
  std::vector<Matrix> out;
  out.reserve(model.params.size());
  for (std::size_t i = 0; i < model.params.size(); ++i) {
    const Parameter& p = model.params[i];
    Matrix m = shaped_zeros(p);
    if (is_norm(model.modules[p.module].leaf)) {
      m.setConstant(p.name == "bias" ? 0.0f : 1.0f);
    } else {
      const float bound = init_bound(model, p);
      float* data = m.data();  // row-major: the flat index is PyTorch's element index
      for (Index e = 0; e < m.size(); ++e)
        data[e] = uniform(
            hash_key({seed, static_cast<std::uint64_t>(Stream::parameter), i, static_cast<std::uint64_t>(e)}), bound);
    }
    out.push_back(std::move(m));
  }
  return out;
}

Matrix input_rows(std::uint64_t seed, int iteration, std::int64_t first_row, std::int64_t rows, std::int64_t features) {
  return data_rows(Stream::input, seed, iteration, first_row, rows, features);
}

Matrix target_rows(std::uint64_t seed, int iteration, std::int64_t first_row, std::int64_t rows, std::int64_t outputs) {
  return data_rows(Stream::target, seed, iteration, first_row, rows, outputs);
}

Matrix leaf_forward(const core::Module& module, std::span<const Matrix* const> params, const Matrix& x,
                    float bias_scale) {
  switch (module.leaf) {
    case LeafKind::linear:
      return linear_forward(params, x, bias_scale);
    case LeafKind::relu:
      return elementwise(x, [](float v) { return v > 0.0f ? v : 0.0f; });
    case LeafKind::sigmoid:
      return elementwise(x, sigmoid);
    case LeafKind::tanh:
      return elementwise(x, [](float v) { return std::tanh(v); });
    case LeafKind::silu:  // x / (1 + exp(-x)), as ATen writes it
      return elementwise(x, [](float v) { return v / (1.0f + std::exp(-v)); });
    case LeafKind::gelu:
      return elementwise(x, gelu);
    case LeafKind::identity:
      return x;
    case LeafKind::rms_norm:
      return rms_norm_forward(params, x);
    case LeafKind::layer_norm:
      return layer_norm_forward(params, x);
    default:
      no_numerics(module);
  }
}

Matrix leaf_backward(const core::Module& module, std::span<const Matrix* const> params, const Matrix& x,
                     const Matrix& grad_y, std::span<Matrix* const> grads) {
  switch (module.leaf) {
    case LeafKind::linear:
      return linear_backward(params, x, grad_y, grads);
    case LeafKind::relu:  // threshold_backward: the gradient passes where the output is positive
      return elementwise(x, grad_y, [](float v, float g) { return v > 0.0f ? g : 0.0f; });
    case LeafKind::sigmoid:  // sigmoid_backward: g (1 - y) y
      return elementwise(x, grad_y, [](float v, float g) {
        const float y = sigmoid(v);
        return g * (1.0f - y) * y;
      });
    case LeafKind::tanh:  // tanh_backward: g (1 - y^2)
      return elementwise(x, grad_y, [](float v, float g) {
        const float y = std::tanh(v);
        return g * (1.0f - y * y);
      });
    case LeafKind::silu:  // silu_backward: g s (1 + x (1 - s))
      return elementwise(x, grad_y, [](float v, float g) {
        const float s = sigmoid(v);
        return g * s * (1.0f + v * (1.0f - s));
      });
    case LeafKind::gelu:
      return elementwise(x, grad_y, [](float v, float g) { return g * gelu_grad(v); });
    case LeafKind::identity:
      require(x.rows() == grad_y.rows() && x.cols() == grad_y.cols(), "gradient shape differs from the input's");
      return grad_y;
    case LeafKind::rms_norm:
      return rms_norm_backward(params, x, grad_y, grads);
    case LeafKind::layer_norm:
      return layer_norm_backward(params, x, grad_y, grads);
    default:
      no_numerics(module);
  }
}

Matrix param_matmul_forward(const Matrix& p, const Matrix& x) {
  require(x.cols() == p.rows(), "parameter matmul: input width differs from the parameter's rows");
  Matrix y(x.rows(), p.cols());
  y.noalias() = x * p;
  return y;
}

Matrix param_matmul_backward(const Matrix& p, const Matrix& x, const Matrix& grad_y, Matrix* grad_p) {
  require(grad_y.cols() == p.cols() && grad_y.rows() == x.rows(), "parameter matmul: gradient shape differs");
  Matrix gx(grad_y.rows(), p.rows());
  gx.noalias() = grad_y * p.transpose();
  if (grad_p) grad_p->noalias() += x.transpose() * grad_y;
  return gx;
}

double squared_error(const Matrix& y, const Matrix& t) {
  require(y.rows() == t.rows() && y.cols() == t.cols(), "output and target shapes differ");
  double sum = 0;
  for (Index i = 0; i < y.size(); ++i) {
    const double d = static_cast<double>(y.data()[i]) - t.data()[i];
    sum += d * d;
  }
  return sum;
}

// mse_loss_backward: (y - t) * norm, norm = 2 / numel rounded to float as the kernel's scalar.
Matrix squared_error_grad(const Matrix& y, const Matrix& t, double scale) {
  require(y.rows() == t.rows() && y.cols() == t.cols(), "output and target shapes differ");
  const auto factor = static_cast<float>(2.0 * scale);
  return (y - t) * factor;
}

void optimizer_step(const core::OptimizerConfig& config, std::span<float> param, std::span<const float> grad,
                    OptimizerState& state) {
  require(param.size() == grad.size(), "optimizer: parameter and gradient sizes differ");
  if (config.kind == core::OptimizerKind::sgd) sgd_step(config, param, grad, state);
  else adam_step(config, param, grad, state);
}

ReferenceRun train_reference(const core::Model& model, const core::OptimizerConfig& optimizer, std::uint64_t seed,
                             int iterations, std::int64_t global_rows, const std::vector<int>& optimizer_after,
                             bool record_grads) {
  if (std::string reason = unsupported_reason(model); !reason.empty()) throw std::invalid_argument(reason);
  require(global_rows > 0, "the reference needs at least one row");
  const std::int64_t outputs = output_features(model);
  const double scale = 1.0 / (static_cast<double>(global_rows) * static_cast<double>(outputs));

  ReferenceRun run;
  run.params = init_parameters(model, seed);
  std::vector<Matrix> grads;
  std::vector<Matrix*> grad_slots;  // null where requires_grad=False: autograd computes nothing there
  for (std::size_t p = 0; p < model.params.size(); ++p)
    grads.push_back(Matrix::Zero(run.params[p].rows(), run.params[p].cols()));
  for (std::size_t p = 0; p < model.params.size(); ++p)
    grad_slots.push_back(model.params[p].requires_grad ? &grads[p] : nullptr);
  std::vector<OptimizerState> states(model.params.size());
  std::vector<bool> reached(model.params.size(), false);  // p.grad is not None
  ModelRunner runner(model, run.params);

  for (int it = 1; it <= iterations; ++it) {
    const Matrix y = runner.forward(input_rows(seed, it, 0, global_rows, model.input_features));
    const Matrix t = target_rows(seed, it, 0, global_rows, outputs);
    run.losses.push_back(squared_error(y, t) * scale);
    runner.backward(squared_error_grad(y, t, scale), grad_slots, reached);
    if (record_grads) run.grads.push_back(grads);
    if (std::find(optimizer_after.begin(), optimizer_after.end(), it) == optimizer_after.end()) continue;
    // optimizer.step() skips parameters whose grad is None; zero_grad(set_to_none=True) after it.
    for (std::size_t p = 0; p < model.params.size(); ++p)
      if (grad_slots[p] && reached[p])
        optimizer_step(optimizer, std::span<float>(run.params[p].data(), run.params[p].size()),
                       std::span<const float>(grads[p].data(), grads[p].size()), states[p]);
    zero(grads);
    std::fill(reached.begin(), reached.end(), false);
  }
  return run;
}

std::int64_t output_features(const core::Model& model) {
  std::int64_t width = model.input_features;
  for (const ForwardStep& step : core::flat_forward(model)) {
    if (step.kind == ForwardStep::Kind::param_matmul) {
      if (model.params[step.index].shape.size() == 2) width = model.params[step.index].shape[1];
    } else if (model.modules[step.index].leaf == LeafKind::linear) {
      width = model.modules[step.index].out_features;
    }
  }
  return width;
}

}  // namespace stratsim::exec::train
