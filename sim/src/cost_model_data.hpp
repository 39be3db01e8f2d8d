// The preset cost models, compiled in from sim/cost-models/*.yaml (CMake writes the definition
// into the build tree, so the YAML files stay the one place the numbers live).
#pragma once

#include <vector>

namespace stratsim::sim::detail {

struct CostModelFile {
  const char* preset;  // "h100"
  const char* text;    // the file's YAML
};

const std::vector<CostModelFile>& cost_model_files();

}  // namespace stratsim::sim::detail
