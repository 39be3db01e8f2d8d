// GPU calibration: measuring one CUDA GPU for `stratsim calibrate --gpu`, which writes a platform
// file for `stratsim simulate --platform FILE` with that GPU's measured compute.
//
// What is measured, with the libraries PyTorch's kernels come from:
//  - cuBLAS GEMMs (cublasGemmEx, float32 accumulation as PyTorch asks for it) on a grid of
//    (m, n, k) shapes for bfloat16, float16 and float32 (float32 without TF32, PyTorch's default
//    for matmul), on random operands: the best of several batches, each captured as a CUDA graph
//    so a shape's time is the GPU's, not the host's call rate (11 us per cuBLAS call on an H100
//    host, where a 64^3 GEMM takes the GPU 2 us);
//  - device-to-device copy bandwidth (bytes read plus bytes written), the rate a streaming
//    element-wise kernel approaches;
//  - the kernel floor: the time per kernel of a CUDA graph of tiny GEMMs, where neither launch
//    latency nor host dispatch hides it.
// The peaks come from the device itself: HBM bandwidth from its memory clock and bus width. GEMM
// rates are written as rates (TFLOP/s), not as fractions of a peak, because the published dense
// peak and the one the SM clock implies differ (989 vs 1,070 TFLOP/s on an H100 SXM).
//
// Collectives across the host's GPUs are not measured here: the platform keeps the preset's
// published NCCL model (sim/cost-models/), which benchmarks/accuracy checks against nccl-tests.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "stratsim/core/dtype.hpp"
#include "stratsim/exec/calibration.hpp"

namespace stratsim::exec {

struct GpuMeasurement {
  std::string name;  // cudaDeviceProp::name, e.g. "NVIDIA H100 80GB HBM3"
  int device = 0;
  int visible = 1;  // CUDA devices this process sees
  int compute_major = 0, compute_minor = 0;
  int multiprocessors = 0;
  double sm_clock_hz = 0;
  double memory_bytes = 0;                  // total device memory
  double peak_memory_bytes_per_second = 0;  // from the memory clock and bus width (0: not reported)
  int driver_version = 0, runtime_version = 0;

  std::vector<std::int64_t> axis;                        // sizes for m, n and k alike
  std::map<core::DType, std::vector<GemmTiming>> gemms;  // m-major, k fastest
  double copy_bytes_per_second = 0;                      // device-to-device, read + write
  double kernel_floor_seconds = 0;
  bool graphs = true;  // every timing ran as a CUDA graph (false: issued one by one, host-bound)
};

struct GemmGrid {
  std::int64_t smallest = 64, largest = 32768;
  int step = 2;  // the factor between neighbouring sizes
  std::vector<core::DType> dtypes = {core::DType::bfloat16, core::DType::float16, core::DType::float32};
  double min_seconds_per_shape = 0.002;  // GPU time of one timed batch
};

// Measures CUDA device `device` on the grid (capped where the operands would not fit its free
// memory). progress(done, total) after each GEMM shape. Throws core::InputError when this build
// has no CUDA or the device cannot be used, with the reason.
GpuMeasurement measure_gpu(int device, const GemmGrid& grid, const std::function<void(int, int)>& progress = {});

// Sizes from `smallest` times `step` each, up to `limit`, while three float32 operands of the
// size squared stay within a quarter of `free_bytes`: the grid that much free memory measures.
std::vector<std::int64_t> gpu_axis(std::int64_t smallest, std::int64_t limit, int step, double free_bytes);

// The preset a GPU's name belongs to ("h100", "h200", "a100"); by compute capability where the
// name says nothing we know (9.x: h100, else a100). `guessed` is set then, and for PCIe and NVL
// cards, whose clocks and links are not the presets' SXM parts'.
std::string gpu_preset_for(const GpuMeasurement& gpu, bool& guessed);

// The best FLOP/s any shape of `dtype` reached.
double best_rate(const GpuMeasurement& gpu, core::DType dtype);

struct GpuCalibration {
  GpuMeasurement gpu;
  std::string host_name, date, command;
};
// The platform description (YAML): the preset the GPU belongs to, its memory, its measured HBM
// peak, and a cost model holding the GEMM rate tables, the copy bandwidth as the element-wise
// class's share of the peak, and the kernel floor.
std::string gpu_platform_yaml(const GpuCalibration& calibration);

}  // namespace stratsim::exec
