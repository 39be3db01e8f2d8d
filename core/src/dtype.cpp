#include "stratsim/core/dtype.hpp"

#include "stratsim/core/enum_names.hpp"

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

namespace {

// The first name of a dtype is torch's; the rest are the aliases plans and models may use.
constexpr EnumNames<DType, 20> kDTypeNames{{{{DType::float32, "float32"},   {DType::float16, "float16"},
                                             {DType::bfloat16, "bfloat16"}, {DType::float64, "float64"},
                                             {DType::int32, "int32"},       {DType::int64, "int64"},
                                             {DType::int8, "int8"},         {DType::uint8, "uint8"},
                                             {DType::bool_, "bool"},        {DType::float32, "float"},
                                             {DType::float32, "fp32"},      {DType::float32, "f32"},
                                             {DType::float16, "half"},      {DType::float16, "fp16"},
                                             {DType::float16, "f16"},       {DType::bfloat16, "bf16"},
                                             {DType::float64, "double"},    {DType::float64, "fp64"},
                                             {DType::int32, "int"},         {DType::int64, "long"}}}};

}  // namespace

std::string_view dtype_name(DType dtype) { return kDTypeNames.name(dtype, "float32"); }

std::optional<DType> parse_dtype(std::string_view text) {
  if (text.starts_with("torch.")) text.remove_prefix(6);
  return kDTypeNames.parse(text);
}

}  // namespace stratsim::core
