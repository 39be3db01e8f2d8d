// Host-side stream resources (backend.hpp StreamResources): buffers in host memory, compute as
// single-precision Eigen GEMMs. The Gloo backend's; also what the calibration of every CPU run uses.
#pragma once

#include <memory>

#include "stratsim/exec/backend.hpp"

namespace stratsim::exec::detail {

std::unique_ptr<StreamResources> make_host_resources();

}  // namespace stratsim::exec::detail
