// The NCCL backend: one CUDA GPU per rank, one NCCL communicator per group instance and program
// stream, the ncclUniqueId carried by the same rendezvous store as Gloo's (a Gloo world underneath
// serves the store and the barriers), compute as cuBLAS GEMMs and copies on the rank's GPU.
//
// Why each choice:
//   * Ranks map to GPUs by LOCAL_RANK; before any NCCL call every rank publishes its host and GPU
//     PCI bus id, so two ranks on one GPU fail at once with a message naming both, rather than
//     NCCL's "Duplicate GPU detected" (or a hang) deep inside init.
//   * Communicators are created non-blocking and every wait polls with the timeout: a dead or
//     hung peer makes this rank abort the communicator (ncclCommAbort) and fail, never hang.
//   * Every op synchronises its CUDA stream before returning, so the executor's per-op timings
//     are completion times; overlap comes from the program's streams running as threads, each
//     with its own CUDA streams.
//   * Compute runs what the simulator prices: an op's own GEMM shapes in its dtype (cuBLAS, as
//     `calibrate --gpu` measures them), other ops as the larger of their math (GEMM blocks in
//     their dtype) and their memory traffic (device-to-device copies).
#include <memory>
#include <string>

#include <fmt/format.h>

#include "stratsim/core/errors.hpp"
#include "stratsim/exec/backend.hpp"

#if STRATSIM_HAVE_NCCL

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "cublas_gemm.hpp"

namespace stratsim::exec {
namespace {

using Clock = std::chrono::steady_clock;

void check(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess) throw CommError(fmt::format("{}: CUDA error: {}", what, cudaGetErrorString(status)));
}

void check(ncclResult_t status, const std::string& what) {
  if (status != ncclSuccess && status != ncclInProgress)
    throw CommError(fmt::format("{}: NCCL error: {}", what, ncclGetErrorString(status)));
}

void check(cublasStatus_t status, const std::string& what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw CommError(fmt::format("{}: cuBLAS error {}", what, static_cast<int>(status)));
}

ncclDataType_t nccl_type(core::DType dtype) {
  switch (dtype) {
    case core::DType::float32:
      return ncclFloat32;
    case core::DType::float16:
      return ncclFloat16;
    case core::DType::bfloat16:
      return ncclBfloat16;
    case core::DType::float64:
      return ncclFloat64;
    case core::DType::int32:
      return ncclInt32;
    case core::DType::int64:
      return ncclInt64;
    case core::DType::int8:
      return ncclInt8;
    case core::DType::uint8:
    case core::DType::bool_:
      return ncclUint8;
  }
  return ncclUint8;
}

// Waits for `stream` while watching the communicator: a remote failure or the timeout aborts it.
void wait_for(cudaStream_t stream, ncclComm_t comm, std::chrono::milliseconds timeout, const std::string& what) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    const cudaError_t state = cudaStreamQuery(stream);
    if (state == cudaSuccess) return;
    if (state != cudaErrorNotReady) check(state, what);
    ncclResult_t async = ncclSuccess;
    if (comm != nullptr) ncclCommGetAsyncError(comm, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      ncclCommAbort(comm);
      check(async, what);
    }
    if (Clock::now() > deadline) {
      if (comm != nullptr) ncclCommAbort(comm);
      throw CommError(fmt::format("{}: timed out after {} ms (a peer died or hung)", what, timeout.count()));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

class DeviceResources : public StreamResources {
 public:
  static constexpr std::int64_t kBlock = 4096;  // block GEMM: large enough to run near the GPU's rate
  static constexpr double kBlockFlops = 2.0 * kBlock * kBlock * kBlock;
  static constexpr std::size_t kCopyBytes = std::size_t{256} << 20;  // past the 50 MB L2

  // Measures the block rates and the copy rate here, before the run's clock starts: compute()
  // needs them to choose between math and memory.
  explicit DeviceResources(int device) : device_(device) {
    check(cudaSetDevice(device), "selecting the GPU");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating a CUDA stream");
    check(cublasCreate(&blas_), "creating a cuBLAS handle");
    check(cublasSetStream(blas_, stream_), "binding cuBLAS to the stream");
    blocks_ = allocate(3 * kBlock * kBlock * sizeof(float), "allocating GEMM blocks");
    copies_ = allocate(2 * kCopyBytes, "allocating copy buffers");
    // Once per GPU and process, one stream at a time: the program's stream threads construct
    // their resources at once, and rates measured side by side read about half (320 TFLOP/s
    // bfloat16 and 1.3 TB/s copies on an H100, against 750 and 3.0 alone).
    static std::mutex measuring;
    static std::map<int, Rates> measured;
    std::lock_guard lock(measuring);
    auto it = measured.find(device);
    if (it == measured.end()) {
      Rates rates;
      for (core::DType dtype : {core::DType::bfloat16, core::DType::float16, core::DType::float32})
        rates.block[detail::gemm_type(dtype)] = measure([&] { block(kBlock, dtype); }, kBlockFlops);
      rates.copy = measure([&] { copy(2.0 * kCopyBytes); }, 2.0 * kCopyBytes);
      it = measured.emplace(device, rates).first;
    }
    rates_ = it->second;
  }
  ~DeviceResources() override {
    for (auto& [pointer, size] : buffers_)
      if (pointer != nullptr) cudaFree(pointer);
    for (void* pointer : {blocks_, copies_, gemm_operands_})
      if (pointer != nullptr) cudaFree(pointer);
    cublasDestroy(blas_);
    cudaStreamDestroy(stream_);
  }

  std::span<std::byte> buffer(int slot, std::size_t bytes) override {
    auto& [pointer, size] = buffers_.at(slot);
    if (size < bytes) {
      if (pointer != nullptr) cudaFree(pointer);
      pointer = nullptr;
      check(cudaMalloc(&pointer, bytes), fmt::format("allocating {} bytes on GPU {}", bytes, device_));
      size = bytes;
    }
    return {static_cast<std::byte*>(pointer), bytes};
  }

  // The simulator's roofline run for real: the op's FLOPs as GEMM blocks in its dtype, or its
  // bytes (read plus written) as device-to-device copies, whichever this GPU's measured rates
  // say takes longer.
  void compute(double flops, double bytes, core::DType dtype) override {
    const double math = flops / rates_.block.at(detail::gemm_type(dtype));
    if (bytes / rates_.copy > math) copy(bytes);
    else blocks(flops, dtype);
    check(cudaStreamSynchronize(stream_), "compute");
  }

  void prepare_gemms(std::span<const core::GemmShape> gemms, core::DType dtype) override {
    std::size_t largest = 0;
    for (const core::GemmShape& g : gemms)
      largest = std::max({largest, static_cast<std::size_t>(g.m * g.k), static_cast<std::size_t>(g.k * g.n),
                          static_cast<std::size_t>(g.m * g.n)});
    const std::size_t bytes = 3 * largest * static_cast<std::size_t>(detail::gemm_element_bytes(dtype));
    if (bytes <= gemm_bytes_) return;
    if (gemm_operands_ != nullptr) cudaFree(gemm_operands_);
    gemm_operands_ = allocate(bytes, "allocating GEMM operands");
    gemm_bytes_ = bytes;
  }

  // The op's own GEMMs, C[m,n] = A[m,k] B[k,n], in its dtype: what calibrate --gpu measured.
  void compute_gemms(std::span<const core::GemmShape> gemms, core::DType dtype) override {
    prepare_gemms(gemms, dtype);
    const std::size_t third = gemm_bytes_ / 3;
    auto* base = static_cast<std::byte*>(gemm_operands_);
    for (const core::GemmShape& g : gemms)
      check(detail::gemm_row_major(blas_, g.m, g.n, g.k, base, base + third, base + 2 * third, dtype), "GEMM");
    check(cudaStreamSynchronize(stream_), "compute");
  }

  // bfloat16 blocks: what the compute of a mixed-precision step mostly is.
  double calibrate() override { return rates_.block.at(CUDA_R_16BF); }
  double memory_bandwidth() override { return rates_.copy; }

 private:
  void* allocate(std::size_t bytes, const std::string& what) {
    void* pointer = nullptr;
    check(cudaMalloc(&pointer, bytes), fmt::format("{}: {} bytes on GPU {}", what, bytes, device_));
    check(detail::fill_random(pointer, bytes), what);
    return pointer;
  }

  // Seconds-based rate of `work` (amount units per second): the best of three after a warm-up.
  template <typename Work>
  double measure(Work&& work, double amount) {
    work();
    check(cudaStreamSynchronize(stream_), "measuring the GPU");
    double best = INFINITY;
    for (int i = 0; i < 3; ++i) {
      const auto start = Clock::now();
      work();
      check(cudaStreamSynchronize(stream_), "measuring the GPU");
      best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
    }
    return amount / std::max(best, 1e-9);
  }

  void block(std::int64_t n, core::DType dtype) {
    auto* base = static_cast<std::byte*>(blocks_);
    const std::size_t third = kBlock * kBlock * sizeof(float);
    check(detail::gemm_row_major(blas_, n, n, n, base, base + third, base + 2 * third, dtype), "GEMM block");
  }

  void blocks(double flops, core::DType dtype) {
    const auto count = static_cast<long long>(std::max(0.0, flops / kBlockFlops));
    for (long long i = 0; i < count; ++i) block(kBlock, dtype);
    const auto n =
        static_cast<std::int64_t>(std::cbrt(std::max(0.0, flops - static_cast<double>(count) * kBlockFlops) / 2.0));
    if (n > 0) block(n, dtype);
  }

  // Moves `bytes` (read plus written) by device-to-device copies of up to kCopyBytes.
  void copy(double bytes) {
    auto* source = static_cast<std::byte*>(copies_);
    for (double left = bytes / 2; left >= 1; left -= static_cast<double>(kCopyBytes)) {
      const auto chunk = static_cast<std::size_t>(std::min(left, static_cast<double>(kCopyBytes)));
      check(cudaMemcpyAsync(source + kCopyBytes, source, chunk, cudaMemcpyDeviceToDevice, stream_), "copying");
    }
  }

  int device_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  void* blocks_ = nullptr;
  void* copies_ = nullptr;
  void* gemm_operands_ = nullptr;
  std::size_t gemm_bytes_ = 0;
  struct Rates {
    std::map<cudaDataType_t, double> block;  // FLOP/s of block GEMMs by CUDA type
    double copy = 0;                         // bytes (read + written) per second
  };
  Rates rates_;
  std::array<std::pair<void*, std::size_t>, 2> buffers_{};
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size, std::string key, std::chrono::milliseconds timeout)
      : comm_(comm), rank_(rank), size_(size), key_(std::move(key)), timeout_(timeout) {
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating a CUDA stream");
  }
  ~NcclCommunicator() override {
    ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string algorithm(core::CollectiveKind) const override { return "nccl"; }

  void run(const CollectiveCall& call) override {
    const std::string what =
        fmt::format("{} on group {} (rank {} of {})", core::collective_kind_name(call.kind), key_, rank_, size_);
    const ncclDataType_t type = nccl_type(call.dtype);
    const std::size_t element = static_cast<std::size_t>(core::dtype_size(call.dtype));
    void* in = call.input.data();
    void* out = call.output.data();
    switch (call.kind) {
      case core::CollectiveKind::all_reduce:
        check(ncclAllReduce(in, out, call.output.size() / element, type, ncclSum, comm_, stream_), what);
        break;
      case core::CollectiveKind::all_gather:
        check(ncclAllGather(in, out, call.input.size() / element, type, comm_, stream_), what);
        break;
      case core::CollectiveKind::reduce_scatter:
        check(ncclReduceScatter(in, out, call.output.size() / element, type, ncclSum, comm_, stream_), what);
        break;
      case core::CollectiveKind::broadcast:
        check(ncclBroadcast(in, out, call.output.size() / element, type, call.root, comm_, stream_), what);
        break;
      case core::CollectiveKind::all_to_all:
        all_to_all(call, type, element, what);
        break;
      case core::CollectiveKind::scatter:
        scatter(call, type, element, what);
        break;
    }
    wait_for(stream_, comm_, timeout_, what);
  }

 private:
  // NCCL has no all-to-all call: grouped sends and receives of one block per peer.
  void all_to_all(const CollectiveCall& call, ncclDataType_t type, std::size_t element, const std::string& what) {
    const std::size_t block = call.input.size() / static_cast<std::size_t>(size_);
    check(ncclGroupStart(), what);
    for (int peer = 0; peer < size_; ++peer) {
      check(ncclSend(call.input.data() + peer * block, block / element, type, peer, comm_, stream_), what);
      check(ncclRecv(call.output.data() + peer * block, block / element, type, peer, comm_, stream_), what);
    }
    check(ncclGroupEnd(), what);
  }

  // NCCL has no scatter either (ProcessGroupNCCL::scatter is the same): the root sends each rank
  // its block, every rank receives its own.
  void scatter(const CollectiveCall& call, ncclDataType_t type, std::size_t element, const std::string& what) {
    const std::size_t block = call.output.size();
    check(ncclGroupStart(), what);
    if (rank_ == call.root)
      for (int peer = 0; peer < size_; ++peer)
        check(ncclSend(call.input.data() + peer * block, block / element, type, peer, comm_, stream_), what);
    check(ncclRecv(call.output.data(), block / element, type, call.root, comm_, stream_), what);
    check(ncclGroupEnd(), what);
  }

  ncclComm_t comm_;
  int rank_, size_;
  std::string key_;
  std::chrono::milliseconds timeout_;
  cudaStream_t stream_ = nullptr;
};

class NcclBackend : public Backend {
 public:
  NcclBackend(const Rendezvous& rendezvous, int rank, int world_size, int local_rank, const BackendOptions& options)
      : store_(make_gloo_backend(rendezvous, rank, world_size, options)), options_(options) {
    int devices = 0;
    check(cudaGetDeviceCount(&devices), fmt::format("rank {}: looking for GPUs", rank));
    if (local_rank >= devices)
      throw core::InputError(
          fmt::format("rank {}: LOCAL_RANK {} but this host has {} GPU(s); NCCL runs one rank "
                      "per GPU",
                      rank, local_rank, devices));
    device_ = local_rank;
    check(cudaSetDevice(device_), fmt::format("rank {}: selecting GPU {}", rank, device_));
    check_one_rank_per_gpu();
  }

  std::string name() const override { return "nccl"; }
  int rank() const override { return store_->rank(); }
  int world_size() const override { return store_->world_size(); }
  void barrier() override { store_->barrier(); }
  void publish(const std::string& key, const std::string& value) override { store_->publish(key, value); }
  std::string fetch(const std::string& key) override { return store_->fetch(key); }

  std::unique_ptr<StreamResources> stream_resources() override { return std::make_unique<DeviceResources>(device_); }

  std::unique_ptr<Communicator> communicator(const std::string& key, const std::vector<int>& members) override {
    const auto me = std::find(members.begin(), members.end(), rank());
    if (me == members.end()) throw core::InputError(fmt::format("rank {} is not a member of group {}", rank(), key));
    const int group_rank = static_cast<int>(me - members.begin()), size = static_cast<int>(members.size());
    ncclUniqueId id;
    if (group_rank == 0) {
      check(ncclGetUniqueId(&id), "creating an NCCL unique id");
      store_->publish("nccl/" + key, std::string(id.internal, sizeof id.internal));
    } else {
      const std::string bytes = store_->fetch("nccl/" + key);
      std::memcpy(id.internal, bytes.data(), std::min(bytes.size(), sizeof id.internal));
    }
    check(cudaSetDevice(device_), "selecting the GPU");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    const std::string what = fmt::format("rank {}: connecting group {} ({} ranks)", rank(), key, size);
    check(ncclCommInitRankConfig(&comm, size, id, group_rank, &config), what);
    wait_for_init(comm, what);
    return std::make_unique<NcclCommunicator>(comm, group_rank, size, key, options_.timeout);
  }

 private:
  void wait_for_init(ncclComm_t comm, const std::string& what) {
    const auto deadline = Clock::now() + options_.timeout;
    ncclResult_t state = ncclInProgress;
    while (state == ncclInProgress) {
      ncclCommGetAsyncError(comm, &state);
      if (state == ncclInProgress && Clock::now() > deadline) {
        ncclCommAbort(comm);
        throw CommError(fmt::format("{}: timed out after {} ms", what, options_.timeout.count()));
      }
      if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    check(state, what);
  }

  // Every rank learns every rank's (host, GPU) and refuses a GPU shared by two ranks.
  void check_one_rank_per_gpu() {
    char bus[64] = {};
    check(cudaDeviceGetPCIBusId(bus, sizeof bus, device_), "reading the GPU's PCI bus id");
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    store_->publish(fmt::format("gpu/{}", rank()), std::string(host) + " " + bus);
    std::vector<std::string> where(world_size());
    for (int r = 0; r < world_size(); ++r) where[r] = store_->fetch(fmt::format("gpu/{}", r));
    for (int a = 0; a < world_size(); ++a)
      for (int b = a + 1; b < world_size(); ++b)
        if (where[a] == where[b])
          throw core::InputError(
              fmt::format("ranks {} and {} both map to GPU {} (host and PCI bus): NCCL needs one "
                          "GPU per rank; check LOCAL_RANK and CUDA_VISIBLE_DEVICES",
                          a, b, where[a]));
  }

  std::unique_ptr<Backend> store_;
  BackendOptions options_;
  int device_ = 0;
};

}  // namespace

bool nccl_available() { return true; }

int visible_gpus(std::string& why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    why = cudaGetErrorString(status);
    return 0;
  }
  if (count == 0) why = "no CUDA device";
  return count;
}

std::unique_ptr<Backend> make_nccl_backend(const Rendezvous& rendezvous, int rank, int world_size, int local_rank,
                                           const BackendOptions& options) {
  return std::make_unique<NcclBackend>(rendezvous, rank, world_size, local_rank, options);
}

}  // namespace stratsim::exec

#else  // built without CUDA and NCCL

namespace stratsim::exec {

bool nccl_available() { return false; }

int visible_gpus(std::string& why) {
  why = "built without CUDA";
  return 0;
}

std::unique_ptr<Backend> make_nccl_backend(const Rendezvous&, int, int, int, const BackendOptions&) {
  throw core::InputError(
      "--backend nccl: this stratsim was built without CUDA and NCCL (found at configure time "
      "from the CUDA toolkit); use --backend gloo");
}

}  // namespace stratsim::exec

#endif
