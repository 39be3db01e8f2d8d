// Element types of parameters, gradients and collective buffers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace stratsim::core {

enum class DType { float32, float16, bfloat16, float64, int32, int64, int8, uint8, bool_ };

// Bytes per element, as torch.Tensor.element_size() reports it.
int dtype_size(DType dtype);
// PyTorch's spelling without the "torch." prefix: "float32", "bfloat16", ...
std::string_view dtype_name(DType dtype);
// Accepts PyTorch's names and common aliases ("fp32", "bf16", "torch.float16", "half").
std::optional<DType> parse_dtype(std::string_view text);

}  // namespace stratsim::core
