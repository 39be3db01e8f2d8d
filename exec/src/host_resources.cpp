#include "host_resources.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <vector>

#include <Eigen/Dense>

namespace stratsim::exec::detail {
namespace {

using Clock = std::chrono::steady_clock;

// GEMMs on square blocks: big enough for Eigen's blocked kernels to reach their rate, small
// enough (3 x 256 KiB) to stay in cache beside the communication threads.
class HostResources : public StreamResources {
 public:
  static constexpr int kBlock = 256;
  static constexpr double kBlockFlops = 2.0 * kBlock * kBlock * kBlock;

  HostResources()
      : a_(Eigen::MatrixXf::Random(kBlock, kBlock)), b_(Eigen::MatrixXf::Random(kBlock, kBlock)), c_(kBlock, kBlock) {}

  std::span<std::byte> buffer(int slot, std::size_t bytes) override {
    std::vector<std::byte>& buffer = buffers_.at(slot);
    if (buffer.size() < bytes) buffer.resize(bytes);
    return std::span(buffer).first(bytes);
  }

  void compute(double flops) override {
    const auto blocks = static_cast<long long>(flops / kBlockFlops);
    for (long long i = 0; i < blocks; ++i) block();
    const int n = static_cast<int>(std::cbrt((flops - static_cast<double>(blocks) * kBlockFlops) / 2.0));
    if (n > 0) {
      Eigen::MatrixXf c(n, n);
      c.noalias() = a_.topLeftCorner(n, n) * b_.topLeftCorner(n, n);
      sink_ = sink_ + c(0, 0);
    }
  }

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

  Eigen::MatrixXf a_, b_, c_;
  volatile float sink_ = 0;
  std::array<std::vector<std::byte>, 2> buffers_;
};

}  // namespace

std::unique_ptr<StreamResources> make_host_resources() { return std::make_unique<HostResources>(); }

}  // namespace stratsim::exec::detail
