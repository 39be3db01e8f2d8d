// One cuBLAS GEMM as the program states it, C[m,n] = A[m,k] B[k,n] row-major, in the op's dtype
// with float32 accumulation (as PyTorch asks cuBLAS for it): shared by the NCCL backend's compute
// and `calibrate --gpu`, so what the executor runs is what calibration measured. CUDA builds only.
#pragma once

#if STRATSIM_HAVE_NCCL

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "stratsim/core/dtype.hpp"

namespace stratsim::exec::detail {

// The CUDA type a dtype's GEMM runs in: half precision as itself, everything else as float32
// (integer and double ops have no tensor-core path the simulator prices separately).
inline cudaDataType_t gemm_type(core::DType dtype) {
  switch (dtype) {
    case core::DType::bfloat16:
      return CUDA_R_16BF;
    case core::DType::float16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

inline int gemm_element_bytes(core::DType dtype) { return gemm_type(dtype) == CUDA_R_32F ? 4 : 2; }

// Row-major C = A B through column-major cuBLAS: C^T = B^T A^T, so B goes first.
inline cublasStatus_t gemm_row_major(cublasHandle_t handle, std::int64_t m, std::int64_t n, std::int64_t k,
                                     const void* a, const void* b, void* c, core::DType dtype) {
  const float one = 1, zero = 0;
  const cudaDataType_t type = gemm_type(dtype);
  return cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                      &one, b, type, static_cast<int>(n), a, type, static_cast<int>(k), &zero, c, type,
                      static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

// Fills `bytes` of device memory with random 16-bit words that are finite, normal numbers in
// every GEMM dtype: float16 in [0.25, 1) either sign, which read as bfloat16 or as halves of a
// float32 are small normal numbers. Constant or zero operands run faster than real data (less
// power, higher clocks: 895 against 760 TFLOP/s for one bfloat16 shape on an H100).
inline cudaError_t fill_random(void* device, std::size_t bytes) {
  // 16 MiB of words, made once per process and copied over as often as `bytes` needs.
  static const std::vector<std::uint16_t> block = [] {
    std::mt19937 generator(42);
    std::uniform_int_distribution<unsigned> bits(0, 0xffff);
    std::vector<std::uint16_t> words(std::size_t{8} << 20);
    for (std::uint16_t& word : words) {
      const unsigned r = bits(generator);
      word = static_cast<std::uint16_t>((r >> 15) << 15 | (13 + ((r >> 14) & 1)) << 10 | (r & 0x3ff));
    }
    return words;
  }();
  const std::size_t block_bytes = block.size() * 2;
  for (std::size_t at = 0; at < bytes; at += block_bytes) {
    const cudaError_t status = cudaMemcpy(static_cast<std::byte*>(device) + at, block.data(),
                                          std::min(block_bytes, bytes - at), cudaMemcpyHostToDevice);
    if (status != cudaSuccess) return status;
  }
  return cudaDeviceSynchronize();
}

}  // namespace stratsim::exec::detail

#endif
