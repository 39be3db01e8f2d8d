// The sizes stratsim accepts, checked where input is read (README.md "Limits"): past them a model,
// plan or option is refused in one line before anything is allocated, and no size computed from
// accepted input can overflow the 64-bit integers the planner counts elements and bytes in.
#pragma once

#include <cstdint>
#include <optional>

namespace stratsim::core {

// A JSON or YAML document: its size in bytes, how deeply its arrays and objects nest, and (YAML,
// whose aliases repeat a node wherever they are used) how many values it expands to.
inline constexpr std::int64_t kMaxDocumentBytes = std::int64_t{1} << 30;
inline constexpr int kMaxDocumentDepth = 512;
inline constexpr std::int64_t kMaxDocumentValues = std::int64_t{1} << 22;
// Ranks: a world size, a mesh's ranks, a rank's number (below it).
inline constexpr std::int64_t kMaxRanks = std::int64_t{1} << 24;
// Modules in one model, and layers of a zoo model (`zoo:gpt:layers=N`).
inline constexpr std::int64_t kMaxModules = std::int64_t{1} << 18;
inline constexpr std::int64_t kMaxZooLayers = 16384;
// One extent: a feature count, a dimension of a parameter, heads, batch size, sequence length.
inline constexpr std::int64_t kMaxExtent = std::int64_t{1} << 31;
// The elements of one tensor (a parameter, or one activation: batch x sequence x features).
inline constexpr std::int64_t kMaxTensorElements = std::int64_t{1} << 48;
// The parameters of a whole model.
inline constexpr std::int64_t kMaxModelElements = std::int64_t{1} << 50;
// One measured collective (an nccl-tests row, a cost model's measured curve): its size in bytes and
// its time in microseconds.
inline constexpr std::int64_t kMaxCollectiveBytes = std::int64_t{1} << 50;
inline constexpr double kMaxCollectiveMicroseconds = 1e9;

// a * b, or nothing when it overflows (both non-negative).
inline std::optional<std::int64_t> checked_product(std::int64_t a, std::int64_t b) {
  std::int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

}  // namespace stratsim::core
