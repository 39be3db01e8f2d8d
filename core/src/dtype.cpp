#include "stratsim/core/dtype.hpp"

#include <array>
#include <utility>

namespace stratsim::core {

int dtype_size(DType dtype) {
  switch (dtype) {
    case DType::float32: return 4;
    case DType::float16: return 2;
    case DType::bfloat16: return 2;
    case DType::float64: return 8;
    case DType::int32: return 4;
    case DType::int64: return 8;
    case DType::int8: return 1;
    case DType::uint8: return 1;
    case DType::bool_: return 1;
  }
  return 4;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::float32: return "float32";
    case DType::float16: return "float16";
    case DType::bfloat16: return "bfloat16";
    case DType::float64: return "float64";
    case DType::int32: return "int32";
    case DType::int64: return "int64";
    case DType::int8: return "int8";
    case DType::uint8: return "uint8";
    case DType::bool_: return "bool";
  }
  return "float32";
}

std::optional<DType> parse_dtype(std::string_view text) {
  if (text.starts_with("torch.")) text.remove_prefix(6);
  static const std::array<std::pair<std::string_view, DType>, 20> names{{
      {"float32", DType::float32}, {"float", DType::float32},     {"fp32", DType::float32},
      {"float16", DType::float16}, {"half", DType::float16},      {"fp16", DType::float16},
      {"bfloat16", DType::bfloat16}, {"bf16", DType::bfloat16}, {"float64", DType::float64},
      {"double", DType::float64},  {"fp64", DType::float64},      {"int32", DType::int32},
      {"int", DType::int32},       {"int64", DType::int64},       {"long", DType::int64},
      {"int8", DType::int8},       {"uint8", DType::uint8},       {"bool", DType::bool_},
      {"f32", DType::float32},     {"f16", DType::float16},
  }};
  for (const auto& [name, dtype] : names)
    if (name == text) return dtype;
  return std::nullopt;
}

}  // namespace stratsim::core
