#include "host_resources.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <map>
#include <span>
#include <tuple>
#include <vector>

#include <Eigen/Dense>

namespace stratsim::exec::detail {
namespace {

using Clock = std::chrono::steady_clock;

// Compute that honours both an op's FLOPs and its bytes, by its arithmetic intensity
// I = FLOPs / bytes, the way the op itself would run:
//  * I < 1/4 (element-wise, norms): one pass of y += a x over the bytes, memory-bound;
//  * 1/4 <= I <= 64 (a Linear at small batch): the GEMM a Linear is, activations of m = 2I rows
//    against a weight holding the op's bytes, so batch 1 is a memory-bound GEMV and large batches
//    turn compute-bound, as in PyTorch;
//  * I > 64: square GEMM blocks that stay in cache, compute-bound.
// Without bytes (or with `compute(flops, 0)`) it is the cache-resident blocks alone.
class HostResources : public StreamResources {
 public:
  static constexpr int kBlock = 256;
  static constexpr double kBlockFlops = 2.0 * kBlock * kBlock * kBlock;
  static constexpr Eigen::Index kStreamFloats = Eigen::Index{16} << 20;  // 64 MiB: past any cache
  static constexpr Eigen::Index kWeightRows = 1024;

  HostResources()
      : a_(Eigen::MatrixXf::Random(kBlock, kBlock)), b_(Eigen::MatrixXf::Random(kBlock, kBlock)), c_(kBlock, kBlock) {}

  std::span<std::byte> buffer(int slot, std::size_t bytes) override {
    std::vector<std::byte>& buffer = buffers_.at(slot);
    if (buffer.size() < bytes) buffer.resize(bytes);
    return std::span(buffer).first(bytes);
  }

  void compute(double flops, double bytes, core::DType /*dtype*/) override {
    const double intensity = bytes > 0 ? flops / bytes : INFINITY;
    if (intensity < 0.25) return stream(bytes);
    if (intensity <= 64) return weight_gemm(flops, bytes);
    compute_blocks(flops);
  }

  void prepare_gemms(std::span<const core::GemmShape> gemms, core::DType /*dtype*/) override {
    for (const core::GemmShape& g : gemms) operands(g);
  }

  // Eigen's single-precision GEMM on the op's own shapes, operands allocated once per shape.
  void compute_gemms(std::span<const core::GemmShape> gemms, core::DType /*dtype*/) override {
    for (const core::GemmShape& g : gemms) {
      Operands& o = operands(g);
      o.c.noalias() = o.a * o.b;
      sink_ = sink_ + o.c(0, 0);
    }
  }

  // The best of a few passes of y += a x over 64 MiB (three streams: read x, read y, write y).
  double memory_bandwidth() override {
    double best = 0;
    for (int i = 0; i < 3; ++i) {
      const auto start = Clock::now();
      stream(static_cast<double>(kStreamFloats) * 12);
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      best = std::max(best, static_cast<double>(kStreamFloats) * 12 / std::max(1e-9, seconds));
    }
    return best;
  }

 private:
  void compute_blocks(double flops) {
    const auto blocks = static_cast<long long>(flops / kBlockFlops);
    for (long long i = 0; i < blocks; ++i) block();
    const int n = static_cast<int>(std::cbrt((flops - static_cast<double>(blocks) * kBlockFlops) / 2.0));
    if (n > 0) {
      Eigen::MatrixXf c(n, n);
      c.noalias() = a_.topLeftCorner(n, n) * b_.topLeftCorner(n, n);
      sink_ = sink_ + c(0, 0);
    }
  }

  // Element-wise traffic: y += a x moves 12 bytes per element (x read, y read and written).
  void stream(double bytes) {
    ensure_stream();
    double left = bytes / 12;
    while (left >= 1) {
      const Eigen::Index n = std::min<Eigen::Index>(kStreamFloats, static_cast<Eigen::Index>(left));
      y_.head(n) += 1e-7f * x_.head(n);
      left -= static_cast<double>(n);
    }
    sink_ = sink_ + y_(0);
  }

  // A Linear's GEMM: the weight is the op's bytes (kWeightRows x n floats, in passes of at most
  // 64 MiB), the activations m = flops / (2 x weight elements) rows.
  void weight_gemm(double flops, double bytes) {
    ensure_stream();
    const double elements = bytes / 4;
    const auto m = std::max<Eigen::Index>(1, std::llround(flops / (2 * elements)));
    if (activations_.rows() != m) activations_ = Eigen::MatrixXf::Random(m, kWeightRows);
    double left = elements;
    while (left >= kWeightRows) {
      const Eigen::Index n = std::min<Eigen::Index>(kStreamFloats, static_cast<Eigen::Index>(left)) / kWeightRows;
      Eigen::Map<const Eigen::MatrixXf> weight(x_.data(), kWeightRows, n);
      product_.resize(m, n);
      product_.noalias() = activations_ * weight;
      sink_ = sink_ + product_(0, 0);
      left -= static_cast<double>(n * kWeightRows);
    }
  }

  void ensure_stream() {
    if (x_.size() == 0) {
      x_ = Eigen::VectorXf::Constant(kStreamFloats, 1.0f);
      y_ = Eigen::VectorXf::Zero(kStreamFloats);
    }
  }

 public:
  // The best of a few timed blocks.
  double calibrate() override {
    double best = 0;
    for (int i = 0; i < 5; ++i) {
      const auto start = Clock::now();
      block();
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      best = std::max(best, kBlockFlops / std::max(1e-9, seconds));
    }
    return best;
  }

 private:
  void block() {
    c_.noalias() = a_ * b_;
    sink_ = sink_ + c_(0, 0);  // keeps the product observable so it is not optimised away
  }

  struct Operands {
    Eigen::MatrixXf a, b, c;
  };
  Operands& operands(const core::GemmShape& g) {
    auto [it, fresh] = operands_.try_emplace({g.m, g.n, g.k});
    if (fresh) {
      it->second.a = Eigen::MatrixXf::Random(g.m, g.k);
      it->second.b = Eigen::MatrixXf::Random(g.k, g.n);
      it->second.c = Eigen::MatrixXf::Zero(g.m, g.n);
    }
    return it->second;
  }

  Eigen::MatrixXf a_, b_, c_;
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, Operands> operands_;
  Eigen::VectorXf x_, y_;  // the streamed memory (allocated on first use)
  Eigen::MatrixXf activations_, product_;
  volatile float sink_ = 0;
  std::array<std::vector<std::byte>, 2> buffers_;
};

}  // namespace

std::unique_ptr<StreamResources> make_host_resources() { return std::make_unique<HostResources>(); }

}  // namespace stratsim::exec::detail
