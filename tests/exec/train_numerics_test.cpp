// The fp32 training numerics behind `stratsim run --train`: every leaf's backward and the whole
// reference training's gradients agree with central differences of their forwards, the leaves'
// forwards with double-precision formulas, the optimizers with two steps worked out by hand in
// PyTorch's operation order, the generator is reproducible and row-sliceable, an optimizer step on
// shards gives the whole tensor's bits, and unsupported models are refused with the module named.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "stratsim/core/errors.hpp"
#include "stratsim/core/json_reader.hpp"
#include "stratsim/core/model_io.hpp"
#include "train_numerics.hpp"
#include "train_state.hpp"

namespace stratsim::test {
namespace {

using core::LeafKind;
using exec::train::Matrix;

// ---- Helpers -----------------------------------------------------------------------------------

// Deterministic U(lo, hi) test data from the generator under test (its own properties are tested below).
Matrix uniform(std::int64_t rows, std::int64_t cols, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Matrix u = exec::train::input_rows(seed, 1, 0, rows, cols);
  return ((u.array() + 1.0f) * (0.5f * (hi - lo)) + lo).matrix();
}

std::vector<const Matrix*> pointers(const std::vector<Matrix>& values) {
  std::vector<const Matrix*> out;
  for (const Matrix& v : values) out.push_back(&v);
  return out;
}

std::vector<Matrix*> pointers(std::vector<Matrix>& values) {
  std::vector<Matrix*> out;
  for (Matrix& v : values) out.push_back(&v);
  return out;
}

std::vector<Matrix> zeros_like(const std::vector<Matrix>& values) {
  std::vector<Matrix> out;
  for (const Matrix& v : values) out.push_back(Matrix::Zero(v.rows(), v.cols()));
  return out;
}

bool same_bits(const Matrix& a, const Matrix& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), sizeof(float) * static_cast<std::size_t>(a.size())) == 0;
}

core::Module leaf(LeafKind kind, std::int64_t in = 0, std::int64_t out = 0) {
  core::Module m;
  m.name = m.fqn = "leaf";
  m.type = std::string(core::leaf_kind_name(kind));
  m.leaf = kind;
  m.in_features = in;
  m.out_features = out;
  return m;
}

core::Model model_from(const nlohmann::json& doc) { return core::parse_model(core::JsonReader(doc, "test.json")); }

// Central differences of f with respect to every `stride`-th element of `value` (perturbed in
// place and restored), against `analytic`. The step actually taken is measured in float, and the
// tolerance is relative to the element and to the largest gradient of the tensor.
void expect_gradient(const std::string& what, Matrix& value, const Matrix& analytic, const std::function<double()>& f,
                     float h, double rtol = 1e-2, double atol = 1e-3, std::int64_t stride = 1) {
  ASSERT_EQ(value.size(), analytic.size()) << what;
  const double scale = std::max(1e-6, static_cast<double>(analytic.cwiseAbs().maxCoeff()));
  for (std::int64_t e = 0; e < value.size(); e += stride) {
    float& element = value.data()[e];
    const float original = element;
    element = original + h;
    const float up_at = element;
    const double up = f();
    element = original - h;
    const float down_at = element;
    const double down = f();
    element = original;
    const double numeric = (up - down) / (static_cast<double>(up_at) - down_at);
    const double expected = analytic.data()[e];
    EXPECT_NEAR(numeric, expected, rtol * std::abs(expected) + atol * scale) << what << " element " << e;
  }
}

// ---- Leaves ------------------------------------------------------------------------------------

struct LeafCase {
  const char* name;
  core::Module module;
  std::vector<Matrix> params;
};

std::vector<LeafCase> leaf_cases() {
  const std::int64_t in = 5, out = 4;
  return {
      {"Linear", leaf(LeafKind::linear, in, out), {uniform(out, in, 11), uniform(1, out, 12)}},
      {"Linear(bias=False)", leaf(LeafKind::linear, in, out), {uniform(out, in, 13)}},
      {"ReLU", leaf(LeafKind::relu), {}},
      {"Sigmoid", leaf(LeafKind::sigmoid), {}},
      {"Tanh", leaf(LeafKind::tanh), {}},
      {"SiLU", leaf(LeafKind::silu), {}},
      {"GELU", leaf(LeafKind::gelu), {}},
      {"Identity", leaf(LeafKind::identity), {}},
      {"RMSNorm", leaf(LeafKind::rms_norm), {uniform(1, in, 14, 0.5f, 1.5f)}},
      {"RMSNorm(elementwise_affine=False)", leaf(LeafKind::rms_norm), {}},
      {"LayerNorm", leaf(LeafKind::layer_norm), {uniform(1, in, 15, 0.5f, 1.5f), uniform(1, in, 16)}},
      {"LayerNorm(bias=False)", leaf(LeafKind::layer_norm), {uniform(1, in, 17, 0.5f, 1.5f)}},
      {"LayerNorm(elementwise_affine=False)", leaf(LeafKind::layer_norm), {}},
  };
}

// ReLU's kink at 0 would spoil a central difference that straddles it.
Matrix leaf_input(std::int64_t rows, std::int64_t cols) {
  Matrix x = uniform(rows, cols, 21, -2.0f, 2.0f);
  return x.unaryExpr([](float v) { return std::abs(v) < 0.1f ? v + 0.25f : v; });
}

TEST(TrainNumericsLeafTest, BackwardMatchesCentralDifferences) {
  for (LeafCase& c : leaf_cases()) {
    SCOPED_TRACE(c.name);
    Matrix x = leaf_input(3, 5);
    const Matrix probe = uniform(3, c.module.leaf == LeafKind::linear ? 4 : 5, 22);
    // d/dz of sum(leaf(z) * probe) is leaf_backward with grad_y = probe.
    auto loss = [&] {
      const Matrix y = exec::train::leaf_forward(c.module, pointers(c.params), x);
      return (y.cast<double>().array() * probe.cast<double>().array()).sum();
    };
    std::vector<Matrix> grads = zeros_like(c.params);
    const Matrix grad_x = exec::train::leaf_backward(c.module, pointers(c.params), x, probe, pointers(grads));
    expect_gradient("input", x, grad_x, loss, 1e-2f);
    for (std::size_t p = 0; p < c.params.size(); ++p)
      expect_gradient("parameter " + std::to_string(p), c.params[p], grads[p], loss, 1e-2f);
  }
}

double gelu_ref(double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); }

TEST(TrainNumericsLeafTest, ForwardMatchesDoublePrecisionFormulas) {
  const Matrix x = leaf_input(3, 5);
  const Matrix w = uniform(1, 5, 31, 0.5f, 1.5f), b = uniform(1, 5, 32);
  auto check = [&](const char* what, const core::Module& m, const std::vector<Matrix>& params,
                   const std::function<double(int, int)>& expected) {
    const Matrix y = exec::train::leaf_forward(m, pointers(params), x);
    ASSERT_EQ(y.rows(), x.rows());
    for (int r = 0; r < y.rows(); ++r)
      for (int c = 0; c < y.cols(); ++c) EXPECT_NEAR(y(r, c), expected(r, c), 2e-6) << what << " " << r << "," << c;
  };
  auto row_mean = [&](int r, const std::function<double(double)>& f) {
    double s = 0;
    for (int c = 0; c < x.cols(); ++c) s += f(x(r, c));
    return s / static_cast<double>(x.cols());
  };
  check("ReLU", leaf(LeafKind::relu), {}, [&](int r, int c) { return std::max(0.0, double{x(r, c)}); });
  check("Sigmoid", leaf(LeafKind::sigmoid), {}, [&](int r, int c) { return 1.0 / (1.0 + std::exp(-double{x(r, c)})); });
  check("Tanh", leaf(LeafKind::tanh), {}, [&](int r, int c) { return std::tanh(double{x(r, c)}); });
  check("SiLU", leaf(LeafKind::silu), {}, [&](int r, int c) { return x(r, c) / (1.0 + std::exp(-double{x(r, c)})); });
  check("GELU", leaf(LeafKind::gelu), {}, [&](int r, int c) { return gelu_ref(x(r, c)); });
  check("Identity", leaf(LeafKind::identity), {}, [&](int r, int c) { return double{x(r, c)}; });
  check("RMSNorm", leaf(LeafKind::rms_norm), {w}, [&](int r, int c) {
    return x(r, c) / std::sqrt(row_mean(r, [](double v) { return v * v; }) + 1e-6) * w(0, c);
  });
  check("LayerNorm", leaf(LeafKind::layer_norm), {w, b}, [&](int r, int c) {
    const double mean = row_mean(r, [](double v) { return v; });
    const double var = row_mean(r, [&](double v) { return (v - mean) * (v - mean); });
    return (x(r, c) - mean) / std::sqrt(var + 1e-5) * w(0, c) + b(0, c);
  });
}

TEST(TrainNumericsLeafTest, LinearScalesTheBiasInForwardOnlyAndAddsIntoGradients) {
  const core::Module m = leaf(LeafKind::linear, 5, 4);
  const std::vector<Matrix> params = {uniform(4, 5, 41), uniform(1, 4, 42)};
  const Matrix x = uniform(3, 5, 43), g = uniform(3, 4, 44);
  const Matrix y = exec::train::leaf_forward(m, pointers(params), x, 0.5f);
  for (int r = 0; r < 3; ++r)
    for (int o = 0; o < 4; ++o) {
      double expected = 0.5 * params[1](0, o);
      for (int i = 0; i < 5; ++i) expected += double{x(r, i)} * params[0](o, i);
      EXPECT_NEAR(y(r, o), expected, 1e-6);
    }
  std::vector<Matrix> grads = zeros_like(params);
  exec::train::leaf_backward(m, pointers(params), x, g, pointers(grads));
  exec::train::leaf_backward(m, pointers(params), x, g, pointers(grads));  // adds, does not overwrite
  const Matrix column_sums = g.colwise().sum();
  for (int o = 0; o < 4; ++o) EXPECT_FLOAT_EQ(grads[1](0, o), 2 * column_sums(0, o));  // unscaled
  const Matrix weight_grad = g.transpose() * x;
  EXPECT_TRUE(grads[0].isApprox(2 * weight_grad));
  // A null gradient entry is skipped; the input gradient does not depend on it.
  std::vector<Matrix*> only_bias = {nullptr, &grads[1]};
  const Matrix grad_x = exec::train::leaf_backward(m, pointers(params), x, g, only_bias);
  EXPECT_TRUE(grad_x.isApprox(g * params[0]));
  EXPECT_TRUE(grads[0].isApprox(2 * weight_grad));
}

TEST(TrainNumericsLeafTest, ParamMatmulMatchesCentralDifferences) {
  Matrix p = uniform(5, 3, 51), x = uniform(4, 5, 52);
  const Matrix probe = uniform(4, 3, 53);
  auto loss = [&] {
    const Matrix y = exec::train::param_matmul_forward(p, x);
    return (y.cast<double>().array() * probe.cast<double>().array()).sum();
  };
  Matrix grad_p = Matrix::Zero(5, 3);
  const Matrix grad_x = exec::train::param_matmul_backward(p, x, probe, &grad_p);
  expect_gradient("input", x, grad_x, loss, 1e-2f);
  expect_gradient("parameter", p, grad_p, loss, 1e-2f);
  EXPECT_TRUE(same_bits(exec::train::param_matmul_backward(p, x, probe, nullptr), grad_x));
}

TEST(TrainNumericsLossTest, SquaredErrorAndGradient) {
  const Matrix y = uniform(3, 4, 61), t = uniform(3, 4, 62);
  double expected = 0;
  for (int i = 0; i < y.size(); ++i) expected += std::pow(double{y.data()[i]} - t.data()[i], 2);
  EXPECT_DOUBLE_EQ(exec::train::squared_error(y, t), expected);
  const Matrix g = exec::train::squared_error_grad(y, t, 1.0 / 12);
  for (int i = 0; i < y.size(); ++i) EXPECT_NEAR(g.data()[i], 2.0 * (y.data()[i] - t.data()[i]) / 12, 1e-7);
}

// ---- Whole models ------------------------------------------------------------------------------

// The forward walk written again here, so train_reference's own walk and backward are what is
// checked. It also records the sign of every ReLU input: a central difference whose interval
// moves one across 0 measures the kink, not the gradient.
struct Evaluation {
  double loss = 0;
  std::vector<bool> relu_signs;
};

Matrix run_module(const core::Model& model, const std::vector<Matrix>& params, int index, Matrix x,
                  std::vector<bool>& relu_signs) {
  const core::Module& m = model.modules[index];
  if (m.leaf != LeafKind::container) {
    if (m.leaf == LeafKind::relu)
      for (Eigen::Index e = 0; e < x.size(); ++e) relu_signs.push_back(x.data()[e] > 0.0f);
    std::vector<const Matrix*> own;
    for (int p : m.params) own.push_back(&params[p]);
    return exec::train::leaf_forward(m, own, x);
  }
  for (const core::ForwardStep& step : m.forward)
    x = step.kind == core::ForwardStep::Kind::child ? run_module(model, params, step.index, std::move(x), relu_signs)
                                                    : exec::train::param_matmul_forward(params[step.index], x);
  return x;
}

Evaluation evaluate(const core::Model& model, const std::vector<Matrix>& params, std::uint64_t seed,
                    std::int64_t rows) {
  Evaluation out;
  const std::int64_t outputs = exec::train::output_features(model);
  const Matrix x = exec::train::input_rows(seed, 1, 0, rows, model.input_features);
  const Matrix y = run_module(model, params, 0, x, out.relu_signs);
  const Matrix t = exec::train::target_rows(seed, 1, 0, rows, outputs);
  out.loss = exec::train::squared_error(y, t) / static_cast<double>(rows * outputs);
  return out;
}

// loss(p + delta) - loss(p - delta) for parameter `p`, and <grad, step> over the step actually
// taken in float; nothing when a ReLU input changes sign in between.
std::optional<std::pair<double, double>> central_difference(const core::Model& model, std::vector<Matrix>& params,
                                                            std::size_t p, const Matrix& delta, const Matrix& grad,
                                                            std::uint64_t seed, std::int64_t rows) {
  const std::vector<bool> signs = evaluate(model, params, seed, rows).relu_signs;
  const Matrix original = params[p];
  params[p] = original + delta;
  const Matrix up_at = params[p];
  const Evaluation up = evaluate(model, params, seed, rows);
  params[p] = original - delta;
  const Evaluation down = evaluate(model, params, seed, rows);
  const Matrix step = up_at - params[p];
  params[p] = original;
  if (up.relu_signs != signs || down.relu_signs != signs) return std::nullopt;
  return std::pair{up.loss - down.loss, (grad.cast<double>().array() * step.cast<double>().array()).sum()};
}

// As above, shrinking the step (x1/4, up to 3 times) until no ReLU input crosses 0.
std::optional<std::pair<double, double>> smooth_difference(const core::Model& model, std::vector<Matrix>& params,
                                                           std::size_t p, Matrix delta, const Matrix& grad,
                                                           std::uint64_t seed, std::int64_t rows) {
  for (int attempt = 0; attempt < 4; ++attempt, delta *= 0.25f)
    if (auto d = central_difference(model, params, p, delta, grad, seed, rows)) return d;
  return std::nullopt;
}

// One micro-step of train_reference against central differences of the loss: element by element
// on about `per_tensor` elements of each parameter, and along a random direction through each
// whole parameter (which sees every element at once).
void check_model_gradients(const core::Model& model, std::int64_t rows, std::int64_t per_tensor) {
  const std::uint64_t seed = 7;
  ASSERT_EQ(exec::train::unsupported_reason(model), "");
  const exec::train::ReferenceRun run = exec::train::train_reference(model, {}, seed, 1, rows, {});
  ASSERT_EQ(run.grads.size(), 1u);
  ASSERT_EQ(run.losses.size(), 1u);
  std::vector<Matrix> params = exec::train::init_parameters(model, seed);
  EXPECT_DOUBLE_EQ(run.losses[0], evaluate(model, params, seed, rows).loss);
  int checked = 0, kinked = 0;
  for (std::size_t p = 0; p < params.size(); ++p) {
    SCOPED_TRACE(model.params[p].fqn);
    const Matrix& grad = run.grads[0][p];
    ASSERT_EQ(grad.rows(), params[p].rows());
    ASSERT_EQ(grad.cols(), params[p].cols());
    if (!model.params[p].requires_grad) {
      EXPECT_TRUE(grad.isZero(0.0));
      continue;
    }
    const double scale = std::max(1e-9, static_cast<double>(grad.cwiseAbs().maxCoeff()));
    const std::int64_t stride = std::max<std::int64_t>(1, params[p].size() / per_tensor);
    for (std::int64_t e = 0; e < params[p].size(); e += stride) {
      Matrix delta = Matrix::Zero(params[p].rows(), params[p].cols());
      delta.data()[e] = 1e-2f;
      const auto d = smooth_difference(model, params, p, delta, grad, seed, rows);
      ++(d ? checked : kinked);
      if (!d) continue;
      // d->second is grad[e] times the step, so the ratio is the numeric gradient.
      const double numeric = d->first * grad.data()[e] / d->second, expected = grad.data()[e];
      if (d->second == 0.0) {
        EXPECT_NEAR(d->first, 0.0, 1e-12) << "element " << e;
      } else {
        EXPECT_NEAR(numeric, expected, 1e-2 * std::abs(expected) + 1e-3 * scale) << "element " << e;
      }
    }
    const Matrix direction = 1e-2f * uniform(params[p].rows(), params[p].cols(), 100 + p);
    const auto d = smooth_difference(model, params, p, direction, grad, seed, rows);
    ++(d ? checked : kinked);
    if (d) {
      EXPECT_NEAR(d->first, d->second, 1e-2 * std::abs(d->second) + 1e-9) << "directional";
    }
  }
  EXPECT_LT(kinked, checked / 10 + 1) << "too many differences straddle a ReLU kink";
}

// Every supported leaf, a parameter matmul in a nested container and at the root, a frozen
// parameter (requires_grad=False: no gradient, but the gradient flows through it) and one the
// forward never uses.
nlohmann::json mixed_model() {
  using nlohmann::json;
  json block = {{"name", "block"},
                {"type", "Block"},
                {"children",
                 {{{"name", "norm"}, {"type", "RMSNorm"}, {"dim", 8}},
                  {{"name", "proj"}, {"type", "Linear"}, {"in_features", 8}, {"out_features", 5}, {"bias", false}},
                  {{"name", "tanh"}, {"type", "Tanh"}, {"functional", true}}}},
                {"parameters", {{{"name", "q"}, {"shape", {5, 7}}}}},
                {"forward", {"norm", "proj", "tanh", "q"}}};
  return {{"name", "Mixed"},
          {"modules",
           {{{"name", "ln"}, {"type", "LayerNorm"}, {"dim", 6}},
            {{"name", "fc1"}, {"type", "Linear"}, {"in_features", 6}, {"out_features", 8}},
            {{"name", "gelu"}, {"type", "GELU"}},
            block,
            {{"name", "silu"}, {"type", "SiLU"}},
            {{"name", "id"}, {"type", "Identity"}},
            {{"name", "relu"}, {"type", "ReLU"}},
            {{"name", "fc2"}, {"type", "Linear"}, {"in_features", 7}, {"out_features", 4}},
            {{"name", "sigmoid"}, {"type", "Sigmoid"}, {"functional", true}}}},
          {"parameters",
           {{{"name", "p"}, {"shape", {4, 6}}},
            {{"name", "frozen"}, {"shape", {6, 3}}, {"requires_grad", false}},
            {{"name", "unused"}, {"shape", {3}}}}},
          {"forward", {"ln", "fc1", "gelu", "block", "silu", "id", "relu", "fc2", "sigmoid", "p", "frozen"}}};
}

TEST(TrainNumericsModelTest, SimpleMlpGradientsMatchCentralDifferences) {
  check_model_gradients(core::load_model("zoo:SimpleMLP"), 4, 12);
}

TEST(TrainNumericsModelTest, TestModelGradientsMatchCentralDifferences) {
  check_model_gradients(core::load_model("zoo:TestModel"), 4, 40);
}

TEST(TrainNumericsModelTest, CompositeParamModelGradientsMatchCentralDifferences) {
  check_model_gradients(core::load_model("zoo:CompositeParamModel"), 2, 2);
}

TEST(TrainNumericsModelTest, MixedModelGradientsMatchCentralDifferences) {
  check_model_gradients(model_from(mixed_model()), 4, 40);
}

TEST(TrainNumericsModelTest, OutputFeaturesFollowTheForwardOrder) {
  EXPECT_EQ(exec::train::output_features(core::load_model("zoo:SimpleMLP")), 8);
  EXPECT_EQ(exec::train::output_features(core::load_model("zoo:TestModel")), 10);
  EXPECT_EQ(exec::train::output_features(core::load_model("zoo:CompositeParamModel")), 100);
  EXPECT_EQ(exec::train::output_features(model_from(mixed_model())), 3);
  EXPECT_EQ(exec::train::output_features(core::load_model("zoo:RMSNormPython")), 10);
}

TEST(TrainNumericsModelTest, GradientsAccumulateAcrossMicroStepsAndZeroAfterTheOptimizer) {
  const core::Model model = core::load_model("zoo:TestModel");
  const core::OptimizerConfig sgd{core::OptimizerKind::sgd, 0.1, 0.0, 0.0, false};
  const auto accumulate = exec::train::train_reference(model, sgd, 3, 2, 4, {});
  const auto stepped = exec::train::train_reference(model, sgd, 3, 2, 4, {1});
  ASSERT_EQ(accumulate.grads.size(), 2u);
  ASSERT_EQ(stepped.grads.size(), 2u);
  EXPECT_EQ(accumulate.losses[0], stepped.losses[0]);
  EXPECT_NE(accumulate.losses[1], stepped.losses[1]);  // the step changed the parameters
  const std::vector<Matrix> init = exec::train::init_parameters(model, 3);
  for (std::size_t p = 0; p < init.size(); ++p) {
    SCOPED_TRACE(model.params[p].fqn);
    EXPECT_TRUE(same_bits(accumulate.grads[0][p], stepped.grads[0][p]));
    EXPECT_TRUE(same_bits(accumulate.params[p], init[p]));  // no optimizer step
    // Micro-step 2 of the accumulating run holds both micro-steps' gradients.
    const Matrix second_only = accumulate.grads[1][p] - accumulate.grads[0][p];
    EXPECT_FALSE(accumulate.grads[1][p].isApprox(accumulate.grads[0][p], 1e-3f));
    EXPECT_GT(second_only.cwiseAbs().maxCoeff(), 0.0f);
    // The stepped run updated after micro-step 1 only: p - lr g, with nothing before step 2's grads.
    const Matrix expected = init[p] + (-0.1f) * stepped.grads[0][p];
    EXPECT_TRUE(same_bits(stepped.params[p], expected));
  }
}

TEST(TrainNumericsModelTest, GradientsStartFromZeroAfterAnOptimizerStep) {
  // lr 0 keeps the parameters, so micro-step 2's own gradient is the accumulated one minus micro-step 1's.
  const core::Model model = core::load_model("zoo:SimpleMLP");
  const core::OptimizerConfig frozen{core::OptimizerKind::sgd, 0.0, 0.0, 0.0, false};
  const auto accumulate = exec::train::train_reference(model, frozen, 3, 2, 4, {});
  const auto stepped = exec::train::train_reference(model, frozen, 3, 2, 4, {1});
  for (std::size_t p = 0; p < model.params.size(); ++p) {
    SCOPED_TRACE(model.params[p].fqn);
    const Matrix second_only = accumulate.grads[1][p] - accumulate.grads[0][p];
    EXPECT_TRUE(stepped.grads[1][p].isApprox(second_only, 1e-4f));
  }
}

TEST(TrainNumericsModelTest, ReferenceStepsEachParametersOwnOptimizerState) {
  const core::Model model = core::load_model("zoo:TestModel");
  const core::OptimizerConfig adam{core::OptimizerKind::adam, 0.01, 0.0, 0.01, true};
  const auto run = exec::train::train_reference(model, adam, 11, 3, 4, {1, 3});
  ASSERT_EQ(run.grads.size(), 3u);
  ASSERT_EQ(run.losses.size(), 3u);
  std::vector<Matrix> params = exec::train::init_parameters(model, 11);
  for (std::size_t p = 0; p < params.size(); ++p) {
    SCOPED_TRACE(model.params[p].fqn);
    exec::train::OptimizerState state;  // persists from step to step
    std::span<float> values(params[p].data(), static_cast<std::size_t>(params[p].size()));
    for (int micro_step : {1, 3}) {
      const Matrix& grad = run.grads[micro_step - 1][p];
      exec::train::optimizer_step(adam, values, std::span<const float>(grad.data(), values.size()), state);
    }
    EXPECT_TRUE(same_bits(run.params[p], params[p]));
  }
}

TEST(TrainNumericsModelTest, FrozenAndUnusedParametersAreNotUpdated) {
  const core::Model model = model_from(mixed_model());
  const core::OptimizerConfig sgd{core::OptimizerKind::sgd, 0.1, 0.9, 0.1, false};
  const auto run = exec::train::train_reference(model, sgd, 5, 2, 4, {1, 2});
  const std::vector<Matrix> init = exec::train::init_parameters(model, 5);
  for (std::size_t p = 0; p < init.size(); ++p) {
    const std::string& fqn = model.params[p].fqn;
    SCOPED_TRACE(fqn);
    const bool fixed = fqn == "frozen" || fqn == "unused";
    EXPECT_EQ(same_bits(run.params[p], init[p]), fixed);
    if (fixed) {
      EXPECT_TRUE(run.grads[1][p].isZero(0.0));
    }
  }
}

// ---- Optimizers --------------------------------------------------------------------------------

// Two steps on p = [0.5, -1.25, 2], grads [0.1, -0.2, 0.3] then [-0.4, 0.005, 0.001] (small enough
// for amsgrad's running maximum to differ from exp_avg_sq), worked out one float rounding per
// PyTorch tensor op in the order of _single_tensor_sgd / _single_tensor_adam / _single_tensor_adamw.
struct TwoSteps {
  std::vector<float> param{0.5f, -1.25f, 2.0f};
  exec::train::OptimizerState state;
  explicit TwoSteps(const core::OptimizerConfig& config) {
    const std::vector<float> g1{0.1f, -0.2f, 0.3f}, g2{-0.4f, 0.005f, 0.001f};
    exec::train::optimizer_step(config, param, g1, state);
    exec::train::optimizer_step(config, param, g2, state);
  }
};

// The values pin one rounding per operation. Where the target has FMA (AArch64, x86 with
// -march=native) the compiler may fuse a * b + c, one rounding fewer: allow a few ulps there.
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
constexpr std::int64_t kUlps = 4;
#else
constexpr std::int64_t kUlps = 0;
#endif

std::int64_t ulps_apart(float a, float b) {
  auto ordered = [](float v) {
    std::int32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    return bits < 0 ? std::int64_t{INT32_MIN} - bits : std::int64_t{bits};
  };
  return std::abs(ordered(a) - ordered(b));
}

void expect_bits(const std::vector<float>& actual, const std::vector<float>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i)
    EXPECT_LE(ulps_apart(actual[i], expected[i]), kUlps)
        << "element " << i << ": " << actual[i] << " (" << std::hexfloat << actual[i] << ") vs " << expected[i];
}

TEST(TrainNumericsOptimizerTest, SgdWithMomentumAndWeightDecay) {
  // buf1 = g1 + 0.01 p0; p1 = p0 - 0.1 buf1; buf2 = 0.9 buf1 + (g2 + 0.01 p1); p2 = p1 - 0.1 buf2.
  // Element 0: buf1 = 0.105, p1 = 0.4895, buf2 = 0.0945 - 0.395105 = -0.300605, p2 = 0.5195605.
  const TwoSteps run({core::OptimizerKind::sgd, 0.1, 0.9, 0.01, false});
  expect_bits(run.param, {0x1.0a03d4p-1f, -0x1.357a3ap+0f, 0x1.efe7e2p+0f});
  EXPECT_NEAR(run.param[0], 0.5195605, 1e-7);
  EXPECT_EQ(run.state.momentum_buffer.size(), 3u);
}

TEST(TrainNumericsOptimizerTest, PlainSgd) {
  const TwoSteps run({core::OptimizerKind::sgd, 0.1, 0.0, 0.0, false});
  expect_bits(run.param, {0x1.0f5c2ap-1f, -0x1.3b020cp+0f, 0x1.f84b5ep+0f});  // p0 - 0.1 g1 - 0.1 g2
  EXPECT_TRUE(run.state.momentum_buffer.empty());
}

TEST(TrainNumericsOptimizerTest, AdamWithL2WeightDecay) {
  const TwoSteps run({core::OptimizerKind::adam, 0.01, 0.0, 0.01, false});
  expect_bits(run.param, {0x1.fb5cf6p-2f, -0x1.3ba8ccp+0f, 0x1.fb9aa6p+0f});
  expect_bits(run.state.exp_avg, {-0x1.ec80cap-6f, -0x1.4577dap-6f, 0x1.fa1a0ep-6f});
  expect_bits(run.state.exp_avg_sq, {0x1.5e78cap-13f, 0x1.7ae0f2p-15f, 0x1.aee642p-14f});
  EXPECT_EQ(run.state.step, 2);
  // Step 1 of Adam moves every element by lr against the sign of its gradient (m/sqrt(v) = sign(g)).
  std::vector<float> p{0.5f, -1.25f, 2.0f};
  exec::train::OptimizerState state;
  exec::train::optimizer_step({core::OptimizerKind::adam, 0.01, 0.0, 0.0, false}, p,
                              std::vector<float>{0.1f, -0.2f, 0.3f}, state);
  EXPECT_NEAR(p[0], 0.49, 1e-6);
  EXPECT_NEAR(p[1], -1.24, 1e-6);
  EXPECT_NEAR(p[2], 1.99, 1e-6);
}

TEST(TrainNumericsOptimizerTest, AdamWDecouplesWeightDecay) {
  const TwoSteps run({core::OptimizerKind::adamw, 0.01, 0.0, 0.01, false});
  expect_bits(run.param, {0x1.fb6350p-2f, -0x1.3bb586p+0f, 0x1.fb9dbep+0f});
}

TEST(TrainNumericsOptimizerTest, AmsgradKeepsTheRunningMaximum) {
  const TwoSteps run({core::OptimizerKind::adam, 0.01, 0.0, 0.0, true});
  expect_bits(run.param, {0x1.fb7d44p-2f, -0x1.3bc5ecp+0f, 0x1.fbb81ap+0f});
  expect_bits(run.state.max_exp_avg_sq, {0x1.647eb2p-13f, 0x1.4f8b5ap-15f, 0x1.797cc6p-14f});
  expect_bits(run.state.exp_avg_sq, {0x1.647eb2p-13f, 0x1.4f6b24p-15f, 0x1.791d36p-14f});
}

TEST(TrainNumericsOptimizerTest, ShardsUpdateToTheWholeTensorsBits) {
  const std::vector<core::OptimizerConfig> configs = {{core::OptimizerKind::sgd, 0.1, 0.9, 0.01, false},
                                                      {core::OptimizerKind::adam, 0.01, 0.0, 0.01, false},
                                                      {core::OptimizerKind::adamw, 0.01, 0.0, 0.01, false},
                                                      {core::OptimizerKind::adam, 0.01, 0.0, 0.0, true}};
  for (const core::OptimizerConfig& config : configs) {
    Matrix whole = uniform(1, 11, 71);
    Matrix parts = whole;
    exec::train::OptimizerState whole_state, first_state, second_state;
    const std::size_t half = 5;
    for (int step = 1; step <= 3; ++step) {
      const Matrix grad = uniform(1, 11, 72 + step);
      std::span<float> all(parts.data(), 11);
      std::span<const float> g(grad.data(), 11);
      exec::train::optimizer_step(config, std::span<float>(whole.data(), 11), g, whole_state);
      exec::train::optimizer_step(config, all.first(half), g.first(half), first_state);
      exec::train::optimizer_step(config, all.subspan(half), g.subspan(half), second_state);
    }
    EXPECT_TRUE(same_bits(whole, parts)) << "optimizer kind " << static_cast<int>(config.kind);
  }
}

// ---- Generator ---------------------------------------------------------------------------------

TEST(TrainNumericsGeneratorTest, InitIsReproducibleAndBounded) {
  const core::Model model = core::load_model("zoo:TestModel");
  const std::vector<Matrix> a = exec::train::init_parameters(model, 42), b = exec::train::init_parameters(model, 42);
  const std::vector<Matrix> other = exec::train::init_parameters(model, 43);
  ASSERT_EQ(a.size(), model.params.size());
  for (std::size_t p = 0; p < a.size(); ++p) {
    const core::Parameter& param = model.params[p];
    SCOPED_TRACE(param.fqn);
    EXPECT_TRUE(same_bits(a[p], b[p]));
    const std::int64_t cols = param.shape.size() == 1 ? param.shape[0] : param.shape[1];
    EXPECT_EQ(a[p].rows(), param.shape.size() == 1 ? 1 : param.shape[0]);
    EXPECT_EQ(a[p].cols(), cols);
    if (param.fqn == "mlp_norm.weight") {
      EXPECT_TRUE(a[p].isOnes(0.0f));
      continue;
    }
    EXPECT_FALSE(same_bits(a[p], other[p]));
    const float in = static_cast<float>(model.modules[param.module].in_features);
    const float bound = 1.0f / std::sqrt(in);
    EXPECT_LT(a[p].maxCoeff(), bound);
    EXPECT_GE(a[p].minCoeff(), -bound);
    EXPECT_GT(a[p].cwiseAbs().maxCoeff(), 0.5f * bound);  // spread over the range, not squeezed
  }
}

TEST(TrainNumericsGeneratorTest, NormBiasesAreZeroAndOtherParametersUseTheirFirstExtent) {
  const core::Model model = model_from(mixed_model());
  const std::vector<Matrix> init = exec::train::init_parameters(model, 1);
  for (std::size_t p = 0; p < init.size(); ++p) {
    const std::string& fqn = model.params[p].fqn;
    SCOPED_TRACE(fqn);
    if (fqn == "ln.bias") {
      EXPECT_TRUE(init[p].isZero(0.0f));
    }
    if (fqn == "ln.weight" || fqn == "block.norm.weight") {
      EXPECT_TRUE(init[p].isOnes(0.0f));
    }
    if (fqn == "p") {  // [4, 6]: bound 1/2
      EXPECT_LT(init[p].cwiseAbs().maxCoeff(), 0.5f);
      EXPECT_GT(init[p].cwiseAbs().maxCoeff(), 0.25f);
    }
    if (fqn == "unused") {  // [3] is a 1 x 3 matrix, bound 1/sqrt(3)
      EXPECT_EQ(init[p].rows(), 1);
      EXPECT_EQ(init[p].cols(), 3);
      EXPECT_LT(init[p].cwiseAbs().maxCoeff(), 1.0f / std::sqrt(3.0f));
    }
  }
}

TEST(TrainNumericsGeneratorTest, RowsAreReproducibleAndSliceable) {
  const Matrix all = exec::train::input_rows(9, 2, 0, 8, 6);
  EXPECT_TRUE(same_bits(all, exec::train::input_rows(9, 2, 0, 8, 6)));
  EXPECT_TRUE(same_bits(exec::train::input_rows(9, 2, 3, 2, 6), all.middleRows(3, 2)));
  const Matrix targets = exec::train::target_rows(9, 2, 0, 8, 6);
  EXPECT_TRUE(same_bits(exec::train::target_rows(9, 2, 5, 3, 6), targets.middleRows(5, 3)));
  // Inputs, targets, other iterations and other seeds are different streams.
  EXPECT_FALSE(same_bits(all, targets));
  EXPECT_FALSE(same_bits(all, exec::train::input_rows(9, 3, 0, 8, 6)));
  EXPECT_FALSE(same_bits(all, exec::train::input_rows(10, 2, 0, 8, 6)));
  const Matrix big = exec::train::input_rows(1, 1, 0, 64, 64);
  EXPECT_GE(big.minCoeff(), -1.0f);
  EXPECT_LT(big.maxCoeff(), 1.0f);
  EXPECT_NEAR(big.mean(), 0.0, 0.05);
  EXPECT_NEAR(big.array().square().mean(), 1.0 / 3, 0.03);  // variance of U(-1, 1)
}

// ---- Supported models --------------------------------------------------------------------------

TEST(TrainNumericsSupportTest, SeedModelsAreSupported) {
  for (const char* spec : {"zoo:SimpleMLP", "zoo:Net", "zoo:CompositeParamModel", "zoo:TestModel", "zoo:MLPModule"})
    EXPECT_EQ(exec::train::unsupported_reason(core::load_model(spec)), "") << spec;
  EXPECT_EQ(exec::train::unsupported_reason(model_from(mixed_model())), "");
}

TEST(TrainNumericsSupportTest, TransformerIsRefusedNamingTheModule) {
  const core::Model model = core::load_model("zoo:gpt:layers=1,hidden=64,heads=2,ffn=128,vocab=100,seq=8");
  EXPECT_EQ(exec::train::unsupported_reason(model),
            "model Transformer: module \"tok_embeddings\" is an Embedding; --train supports Linear, ReLU, Sigmoid, "
            "Tanh, SiLU, GELU, Identity, RMSNorm, LayerNorm and parameter matmuls");
}

TEST(TrainNumericsSupportTest, UnsupportedModelsAreRefused) {
  using nlohmann::json;
  const json fc = {{"name", "fc"}, {"type", "Linear"}, {"in_features", 4}, {"out_features", 4}};
  auto reason = [](const json& doc) { return exec::train::unsupported_reason(model_from(doc)); };
  EXPECT_EQ(reason({{"name", "D"},
                    {"modules",
                     {fc,
                      {{"name", "seq"},
                       {"type", "Sequential"},
                       {"children", {{{"name", "0"}, {"type", "Dropout"}, {"p", 0.1}}}}}}}}),
            "model D: module \"seq.0\" is a Dropout; --train supports Linear, ReLU, Sigmoid, Tanh, SiLU, GELU, "
            "Identity, RMSNorm, LayerNorm and parameter matmuls");
  EXPECT_EQ(reason({{"name", "B"}, {"dtype", "bfloat16"}, {"modules", {fc}}}),
            "model B: parameter \"fc.weight\" is bfloat16; --train computes in float32 only");
  EXPECT_EQ(reason({{"name", "S"}, {"seq_len", 8}, {"modules", {fc}}}), "");  // [batch, seq, features]: rows
  EXPECT_EQ(reason({{"name", "T"},
                    {"modules", {fc}},
                    {"parameters", {{{"name", "t"}, {"shape", {2, 2, 2}}}}},
                    {"forward", {"fc"}}}),
            "model T: parameter \"t\" has shape [2, 2, 2]; --train supports parameters of at most 2 dimensions");
  EXPECT_EQ(reason({{"name", "V"}, {"modules", {fc}}, {"parameters", {{{"name", "v"}, {"shape", {4}}}}}}),
            "model V: module \"V\" multiplies by parameter \"v\" of shape [4]; a parameter matmul needs a 2-D "
            "parameter");
  EXPECT_EQ(
      reason({{"name", "G"},
              {"modules", {fc}},
              {"forward",
               {{{"call", "fc"}, {"in", "x"}, {"out", "h"}}, {{"op", "add"}, {"in", {"x", "h"}}, {"out", "y"}}}}}),
      "model G: module \"G\"'s forward names tensors (branches and joins); --train runs chain forwards only");
  EXPECT_EQ(reason({{"name", "W"},
                    {"modules", {fc, {{"name", "fc2"}, {"type", "Linear"}, {"in_features", 5}, {"out_features", 2}}}}}),
            "model W: module \"fc2\" expects 5 input features but receives 4");
}

TEST(TrainNumericsSupportTest, TrainReferenceRefusesAnUnsupportedModel) {
  const core::Model model = core::load_model("zoo:gpt:layers=1,hidden=64,heads=2,ffn=128,vocab=100,seq=8");
  EXPECT_THROW(exec::train::train_reference(model, {}, 1, 1, 2, {}), std::invalid_argument);
}

// A [batch, seq, features] tensor lives as its [batch * seq, features] matrix; a split along the
// sequence keeps each sample's share of positions, DTensor's Shard(1) of the 3-D tensor.
TEST(TrainTensorLayout, SequenceSplitsKeepEachSamplesPositions) {
  Matrix values(8, 2);  // 2 samples x 4 positions x 2 features: element i is i
  for (Eigen::Index i = 0; i < values.size(); ++i) values.data()[i] = static_cast<float>(i);
  const exec::train::Tensor whole{values, core::Placement::replicate(), 2};
  const auto flat = [](const exec::train::Tensor& t) {
    return std::vector<float>(t.value.data(), t.value.data() + t.value.size());
  };
  const exec::train::Tensor seq1 = exec::train::chunk_of(whole, 1, 2, 1);
  EXPECT_EQ(flat(seq1), (std::vector<float>{4, 5, 6, 7, 12, 13, 14, 15}));  // positions 2-3 of both samples
  EXPECT_EQ(seq1.value.cols(), 2);
  EXPECT_EQ(seq1.sequences, 2);
  const exec::train::Tensor batch1 = exec::train::chunk_of(whole, 0, 2, 1);
  EXPECT_EQ(flat(batch1), (std::vector<float>{8, 9, 10, 11, 12, 13, 14, 15}));  // sample 1
  EXPECT_EQ(batch1.sequences, 1);
  const exec::train::Tensor features1 = exec::train::chunk_of(whole, 2, 2, 1);
  EXPECT_EQ(flat(features1), (std::vector<float>{1, 3, 5, 7, 9, 11, 13, 15}));
  for (int d = 0; d < 3; ++d) {
    const exec::train::Tensor back =
        exec::train::concat({exec::train::chunk_of(whole, d, 2, 0), exec::train::chunk_of(whole, d, 2, 1)}, d);
    EXPECT_EQ(flat(back), flat(whole)) << "dim " << d;
    EXPECT_EQ(back.sequences, 2) << "dim " << d;
  }
  EXPECT_THROW(exec::train::chunk_of(whole, 1, 3, 0), core::InputError);  // 4 positions over 3 ranks
}

}  // namespace
}  // namespace stratsim::test
