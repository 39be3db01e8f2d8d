// Measuring one CUDA GPU for `stratsim calibrate --gpu` (gpu_calibration.hpp), and the platform
// file it writes. The CUDA half builds where the NCCL backend does (the CUDA toolkit with NCCL);
// elsewhere measure_gpu says why it cannot run.
#include "stratsim/exec/gpu_calibration.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>

#include "stratsim/core/errors.hpp"

#if STRATSIM_HAVE_NCCL
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "cublas_gemm.hpp"
#endif

namespace stratsim::exec {

std::vector<std::int64_t> gpu_axis(std::int64_t smallest, std::int64_t limit, int step, double free_bytes) {
  std::vector<std::int64_t> axis;
  for (std::int64_t size = smallest; size <= limit; size *= std::max(2, step)) {
    const double operands = 3.0 * static_cast<double>(size) * static_cast<double>(size) * 4;  // float32
    if (operands > free_bytes / 4) break;
    axis.push_back(size);
  }
  return axis;
}

std::string gpu_preset_for(const GpuMeasurement& gpu, bool& guessed) {
  guessed = false;
  for (const char* preset : {"h200", "h100", "a100"}) {
    std::string upper = preset;
    std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
    if (gpu.name.find(upper) == std::string::npos) continue;
    // The presets are SXM parts: a PCIe or NVL card's clocks and links differ.
    guessed = gpu.name.find("PCIe") != std::string::npos || gpu.name.find("NVL") != std::string::npos;
    return preset;
  }
  guessed = true;
  return gpu.compute_major >= 9 ? "h100" : "a100";
}

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string rate_table(const GpuMeasurement& gpu, core::DType dtype) {
  std::string axis = fmt::format("{}", fmt::join(gpu.axis, ", "));
  std::string values;
  const std::vector<GemmTiming>& timings = gpu.gemms.at(dtype);
  for (std::size_t i = 0; i < timings.size(); ++i) {
    const double tflops = timings[i].shape.flops() / timings[i].seconds / 1e12;
    values += fmt::format("{}{:.4g}", i == 0 ? "" : (i % gpu.axis.size() == 0 ? ",\n          " : ", "),
                          std::max(tflops, 1e-4));
  }
  return fmt::format(
      "      {}:\n"
      "        source: \"measured: cuBLAS cublasGemmEx, {}, float32 accumulation, row-major NN, random operands\"\n"
      "        m: [{}]\n        n: [{}]\n        k: [{}]\n        tflops: [\n          {}]\n",
      core::dtype_name(dtype), core::dtype_name(dtype), axis, axis, axis, values);
}

}  // namespace

double best_rate(const GpuMeasurement& gpu, core::DType dtype) {
  double best = 0;
  for (const GemmTiming& t : gpu.gemms.at(dtype)) best = std::max(best, t.shape.flops() / t.seconds);
  return best;
}

std::string gpu_platform_yaml(const GpuCalibration& c) {
  const GpuMeasurement& gpu = c.gpu;
  bool guessed = false;
  const std::string preset = gpu_preset_for(gpu, guessed);
  std::string tables, rates;
  for (const auto& [dtype, timings] : gpu.gemms) {
    tables += rate_table(gpu, dtype);
    rates +=
        fmt::format("{}{} {:.0f}", rates.empty() ? "" : ", ", core::dtype_name(dtype), best_rate(gpu, dtype) / 1e12);
  }
  const double peak = gpu.peak_memory_bytes_per_second;
  std::string memory_fields, elementwise;
  if (peak > 0) {
    memory_fields = fmt::format("hbm_gbps: {:.0f}\n", peak / 1e9);
    elementwise = fmt::format(
        "    op_classes:\n"
        "      elementwise: {{memory: {:.3f}, source: \"measured: device-to-device copy {:.0f} GB/s (read + write) of "
        "the {:.0f} GB/s peak\"}}\n",
        std::min(1.0, gpu.copy_bytes_per_second / peak), gpu.copy_bytes_per_second / 1e9, peak / 1e9);
  }
  return fmt::format(
      R"(# Written by `{command}` on {host} ({date}):
# {name}, compute capability {major}.{minor}, {sms} SMs at {clock:.0f} MHz, {memory:.1f} GiB, CUDA driver {driver}, runtime {runtime}.
#
# Measured here: cuBLAS GEMM rates on a {n}^3 grid of shapes (best TFLOP/s: {rates}), the
# device-to-device copy rate ({copy:.0f} GB/s, read + write) and the kernel floor ({floor:.2f} us per
# kernel in a CUDA graph of tiny GEMMs).{graphs}
# From the {preset} preset{guess}: the other op classes (attention, norm, embedding,
# optimizer), the node (8 GPUs: set gpus and nodes for yours) and the network, NCCL's published
# model (sim/cost-models/{preset}.yaml): collectives are not measured by calibrate.
preset: {preset}
hbm_gib: {memory:.1f}
{memory_fields}cost_model:
  name: calibrated {name} on {host} ({date})
  sources:
    - "stratsim calibrate --gpu: cuBLAS GEMMs, device-to-device copies and a CUDA graph of tiny GEMMs on {name}"
  compute:
    kernel_floor_us: {floor:.3f}
{elementwise}    gemm:
{tables})",
      fmt::arg("command", c.command), fmt::arg("host", c.host_name), fmt::arg("date", c.date),
      fmt::arg("name", gpu.name), fmt::arg("major", gpu.compute_major), fmt::arg("minor", gpu.compute_minor),
      fmt::arg("sms", gpu.multiprocessors), fmt::arg("clock", gpu.sm_clock_hz / 1e6),
      fmt::arg("memory", gpu.memory_bytes / kGiB), fmt::arg("driver", gpu.driver_version),
      fmt::arg("runtime", gpu.runtime_version), fmt::arg("n", gpu.axis.size()), fmt::arg("rates", rates),
      fmt::arg("copy", gpu.copy_bytes_per_second / 1e9), fmt::arg("floor", gpu.kernel_floor_seconds * 1e6),
      fmt::arg("preset", preset),
      fmt::arg("guess", guessed ? " (a guess: the name is not one of the presets' SXM parts)" : ""),
      fmt::arg("graphs", gpu.graphs ? ""
                                    : "\n# CUDA graphs could not be captured: GEMMs were timed as issued, so small "
                                      "shapes read the host's\n# call rate, not the GPU's."),
      fmt::arg("memory_fields", memory_fields), fmt::arg("elementwise", elementwise), fmt::arg("tables", tables));
}

#if STRATSIM_HAVE_NCCL

namespace {

void check(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess)
    throw core::InputError(fmt::format("{}: CUDA error: {}", what, cudaGetErrorString(status)));
}

void check(cublasStatus_t status, const std::string& what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw core::InputError(
        fmt::format("{}: cuBLAS error {} ({})", what, static_cast<int>(status), cublasGetStatusString(status)));
}

// A captured CUDA graph and its executable instance, destroyed together.
struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t instance = nullptr;
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph() {
    if (instance) cudaGraphExecDestroy(instance);
    if (graph) cudaGraphDestroy(graph);
  }
};

// The CUDA handles and buffers a Gpu holds, released by this base's destructor, which also runs
// when Gpu's constructor throws halfway (a member-wise destructor would not).
struct GpuHandles {
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  void* operands_[3] = {nullptr, nullptr, nullptr};
  GpuHandles() = default;
  GpuHandles(const GpuHandles&) = delete;
  GpuHandles& operator=(const GpuHandles&) = delete;
  ~GpuHandles() {
    for (void* p : operands_)
      if (p) cudaFree(p);
    if (start_) cudaEventDestroy(start_);
    if (stop_) cudaEventDestroy(stop_);
    if (blas_) cublasDestroy(blas_);
    if (stream_) cudaStreamDestroy(stream_);
  }
};

// A device buffer freed when it goes out of scope.
struct DeviceBuffer {
  void* pointer = nullptr;
  DeviceBuffer(std::size_t bytes, const std::string& what) {
    check(cudaMalloc(&pointer, bytes), fmt::format("{}: {} bytes", what, bytes));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(pointer); }
};

class Gpu : private GpuHandles {
 public:
  explicit Gpu(int device) : device_(device) {
    check(cudaSetDevice(device), fmt::format("selecting GPU {}", device));
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating a CUDA stream");
    check(cublasCreate(&blas_), "creating a cuBLAS handle");
    check(cublasSetStream(blas_, stream_), "binding cuBLAS to the stream");
    check(cudaEventCreate(&start_), "creating a CUDA event");
    check(cudaEventCreate(&stop_), "creating a CUDA event");
  }
  void release() {
    for (void*& p : operands_) {
      if (p) cudaFree(p);
      p = nullptr;
    }
  }

  // Three operand buffers of `elements` each, filled with random finite values (fill_random:
  // GEMMs on zeros draw less power and run faster than on real data).
  void prepare(core::DType dtype, std::size_t elements) {
    release();
    const std::size_t bytes = elements * static_cast<std::size_t>(core::dtype_size(dtype));
    for (void*& p : operands_) {
      check(cudaMalloc(&p, bytes), fmt::format("allocating {} bytes on GPU {}", bytes, device_));
      check(detail::fill_random(p, bytes), "filling GEMM operands");
    }
    dtype_ = dtype;
  }

  // C[m,n] = A[m,k] B[k,n], row-major: cuBLAS's column-major C^T = B^T A^T.
  void gemm(std::int64_t m, std::int64_t n, std::int64_t k) {
    check(detail::gemm_row_major(blas_, m, n, k, operands_[0], operands_[1], operands_[2], dtype_),
          fmt::format("GEMM {}x{}x{} {}", m, n, k, core::dtype_name(dtype_)));
  }

  // Captures `count` calls of `work` on the stream into `graph`; leaves graph.instance empty when
  // the stream cannot be captured or a call fails during capture (the capture is always ended).
  template <typename Work>
  void capture(Graph& graph, int count, Work&& work) {
    if (cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    bool issued = true;
    try {
      for (int i = 0; i < count; ++i) work();
    } catch (const core::InputError&) {
      issued = false;
    }
    const cudaError_t ended = cudaStreamEndCapture(stream_, &graph.graph);
    if (!issued || ended != cudaSuccess || cudaGraphInstantiate(&graph.instance, graph.graph, 0) != cudaSuccess)
      graph.instance = nullptr;
    cudaGetLastError();  // a failed capture leaves its error behind
  }

  // Seconds per call of `work` over a batch of `count` back-to-back calls, GPU time.
  template <typename Work>
  double timed(int count, Work&& work) {
    check(cudaEventRecord(start_, stream_), "timing");
    for (int i = 0; i < count; ++i) work();
    check(cudaEventRecord(stop_, stream_), "timing");
    check(cudaEventSynchronize(stop_), "timing");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start_, stop_), "timing");
    return ms / 1e3 / count;
  }

  // Seconds per call of `work`, GPU time, over a batch of `count` calls captured as one CUDA graph:
  // issued one by one, a cuBLAS call costs the host about 11 us, longer than a small GEMM takes
  // an H100 (2 us at 64^3, 6 us at 1024^3), so the host's call rate would be measured instead.
  // The best of `batches` launches; calls issued one by one where capture fails (`captured`
  // then turns false, and the platform file says so).
  template <typename Work>
  double per_call(int count, int batches, Work&& work) {
    Graph graph;
    capture(graph, count, work);
    double best = INFINITY;
    if (graph.instance) {
      auto launch = [&] { check(cudaGraphLaunch(graph.instance, stream_), "launching a CUDA graph"); };
      launch();  // the first launch uploads the graph
      for (int batch = 0; batch < batches; ++batch) best = std::min(best, timed(1, launch) / count);
      return best;
    }
    captured = false;
    for (int batch = 0; batch < batches; ++batch) best = std::min(best, timed(count, work));
    return best;
  }

  double time_gemm(const core::GemmShape& shape, double min_seconds) {
    auto work = [&] { gemm(shape.m, shape.n, shape.k); };
    work();  // cuBLAS chooses its kernel on the first call of a shape
    // One call sets the batch size; for small shapes it reads the host's rate, which only makes
    // the batch smaller than min_seconds asks.
    const double once = timed(1, work);
    const int count = static_cast<int>(std::clamp(min_seconds / std::max(once, 1e-7), 1.0, 2000.0));
    return std::min(once, per_call(count, once > 0.05 ? 1 : 3, work));
  }

  // Read + write bytes per second of device-to-device copies of `bytes`.
  double copy_rate(std::size_t bytes) {
    const DeviceBuffer from(bytes, "allocating the copy source"), to(bytes, "allocating the copy target");
    auto copy = [&] {
      check(cudaMemcpyAsync(to.pointer, from.pointer, bytes, cudaMemcpyDeviceToDevice, stream_), "copying");
    };
    copy();
    double best = INFINITY;
    for (int batch = 0; batch < 3; ++batch) best = std::min(best, timed(5, copy));
    return 2.0 * static_cast<double>(bytes) / best;
  }

  // GPU time per kernel of a graph of tiny GEMMs: the floor no kernel goes under.
  double kernel_floor() {
    prepare(core::DType::bfloat16, 64 * 64);
    auto work = [&] { gemm(64, 64, 64); };
    work();
    return per_call(200, 3, work);
  }

  bool captured = true;  // every batch ran as a CUDA graph

 private:
  int device_;
  core::DType dtype_ = core::DType::float32;
};

int attribute(cudaDeviceAttr which, int device) {
  int value = 0;
  return cudaDeviceGetAttribute(&value, which, device) == cudaSuccess ? value : 0;
}

}  // namespace

GpuMeasurement measure_gpu(int device, const GemmGrid& grid, const std::function<void(int, int)>& progress) {
  GpuMeasurement gpu;
  const cudaError_t counted = cudaGetDeviceCount(&gpu.visible);
  if (counted != cudaSuccess)
    throw core::InputError(fmt::format("calibrate --gpu: no usable CUDA GPU ({})", cudaGetErrorString(counted)));
  if (device < 0 || device >= gpu.visible)
    throw core::InputError(
        fmt::format("calibrate --gpu: --device {}: this host has {} CUDA GPU(s)", device, gpu.visible));
  cudaDeviceProp properties{};
  check(cudaGetDeviceProperties(&properties, device), "reading the GPU's properties");
  gpu.name = properties.name;
  gpu.device = device;
  gpu.compute_major = properties.major;
  gpu.compute_minor = properties.minor;
  gpu.multiprocessors = properties.multiProcessorCount;
  gpu.memory_bytes = static_cast<double>(properties.totalGlobalMem);
  gpu.sm_clock_hz = attribute(cudaDevAttrClockRate, device) * 1e3;
  // Double data rate: two transfers per memory clock over the whole bus.
  gpu.peak_memory_bytes_per_second = attribute(cudaDevAttrMemoryClockRate, device) * 1e3 * 2 *
                                     attribute(cudaDevAttrGlobalMemoryBusWidth, device) / 8.0;
  cudaDriverGetVersion(&gpu.driver_version);
  cudaRuntimeGetVersion(&gpu.runtime_version);

  Gpu measuring(device);
  std::size_t free_bytes = 0, total_bytes = 0;
  check(cudaMemGetInfo(&free_bytes, &total_bytes), "reading free GPU memory");
  const std::vector<std::int64_t> axis =
      gpu_axis(grid.smallest, grid.largest, grid.step, static_cast<double>(free_bytes));
  if (axis.empty())
    throw core::InputError(fmt::format("calibrate --gpu: GPU {} has {:.1f} GiB free, too little for {}x{} operands",
                                       device, static_cast<double>(free_bytes) / (1 << 30), grid.smallest,
                                       grid.smallest));
  gpu.axis = axis;
  // Copies and the floor first: measured after the GEMM grid in the same process, an H100's
  // copies once read 2.6 TB/s; first, 3.0 TB/s on a cool or a hot GPU alike.
  gpu.copy_bytes_per_second = measuring.copy_rate(std::min<std::size_t>(std::size_t{1} << 30, free_bytes / 4));
  gpu.kernel_floor_seconds = measuring.kernel_floor();
  const std::int64_t largest = *std::max_element(axis.begin(), axis.end());
  const int total = static_cast<int>(grid.dtypes.size() * axis.size() * axis.size() * axis.size());
  int done = 0;
  for (core::DType dtype : grid.dtypes) {
    measuring.prepare(dtype, static_cast<std::size_t>(largest * largest));
    std::vector<GemmTiming>& timings = gpu.gemms[dtype];
    for (std::int64_t m : axis)
      for (std::int64_t n : axis)
        for (std::int64_t k : axis) {
          const core::GemmShape shape{m, n, k};
          timings.push_back({shape, measuring.time_gemm(shape, grid.min_seconds_per_shape)});
          if (progress) progress(++done, total);
        }
  }
  gpu.graphs = measuring.captured;
  return gpu;
}

#else  // built without CUDA

GpuMeasurement measure_gpu(int, const GemmGrid&, const std::function<void(int, int)>&) {
  throw core::InputError(
      "calibrate --gpu: this stratsim was built without CUDA (CMake found no CUDA toolkit with NCCL); calibrate "
      "without --gpu measures this host's CPU and Gloo");
}

#endif

}  // namespace stratsim::exec
