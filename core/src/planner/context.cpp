#include "context.hpp"

#include <fmt/format.h>

#include "stratsim/core/errors.hpp"

namespace stratsim::core::planner {
namespace {

// fnmatch-style match of one dotted pattern against a dotted name, atom by atom, as
// parallelize_module resolves its plan keys.
bool glob_atom(std::string_view pattern, std::string_view text) {
  if (pattern.empty()) return text.empty();
  if (pattern[0] == '*') {
    for (std::size_t i = 0; i <= text.size(); ++i)
      if (glob_atom(pattern.substr(1), text.substr(i))) return true;
    return false;
  }
  if (text.empty()) return false;
  return (pattern[0] == '?' || pattern[0] == text[0]) && glob_atom(pattern.substr(1), text.substr(1));
}
}  // namespace

bool fqn_matches(const std::string& pattern, const std::string& name) {
  std::vector<std::string> pa, na;
  auto split = [](const std::string& s, std::vector<std::string>& out) {
    std::size_t start = 0;
    while (true) {
      std::size_t dot = s.find('.', start);
      out.push_back(s.substr(start, dot - start));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
  };
  split(pattern, pa);
  split(name, na);
  if (pa.size() != na.size()) return false;
  for (std::size_t i = 0; i < pa.size(); ++i)
    if (!glob_atom(pa[i], na[i])) return false;
  return true;
}

PlanContext::PlanContext(const Model& model_, const Plan& plan_, const PlanOptions& options_)
    : model(model_), plan(plan_), mesh(plan_.mesh), options(options_) {
  const std::size_t modules = model.modules.size();
  module_index_.reserve(modules);
  for (std::size_t m = 0; m < modules; ++m) module_index_.emplace(model.modules[m].fqn, static_cast<int>(m));
  params.resize(model.params.size());
  for (std::size_t p = 0; p < model.params.size(); ++p) {
    params[p].local_shape = model.params[p].shape;
    params[p].local_numel = model.params[p].numel();
  }
  checkpointed.assign(modules, false);
  selective.assign(modules, false);
  region_inside_hooks.assign(modules, false);
  reentrant.assign(modules, false);
  for (std::size_t m = 0; m < modules; ++m) checkpointed[m] = model.modules[m].checkpoint;
  fully_shard_step.assign(modules, -1);
  replicate_step.assign(modules, -1);
}

int PlanContext::module_or_fail(const std::string& fqn, const std::string& where, const char* field) const {
  const auto it = module_index_.find(fqn);
  const int index = it == module_index_.end() ? -1 : it->second;
  if (index < 0) throw PlanError(fmt::format("{}: {} \"{}\" is not a submodule of {}", where, field, fqn, model.name));
  return index;
}

std::vector<int> PlanContext::modules_matching(const std::string& pattern, const std::string& where) const {
  if (pattern.find_first_of("*?") == std::string::npos) return {module_or_fail(pattern, where)};
  std::vector<int> matches;
  for (std::size_t m = 1; m < model.modules.size(); ++m)
    if (fqn_matches(pattern, model.modules[m].fqn)) matches.push_back(static_cast<int>(m));
  if (matches.empty())
    throw PlanError(fmt::format("{}: module pattern \"{}\" matches no submodule of {}", where, pattern, model.name));
  return matches;
}

std::vector<int> PlanContext::dims_of(const std::vector<std::string>& names) const {
  std::vector<int> dims;
  for (const auto& name : names) dims.push_back(mesh.dim_index(name));
  if (dims.empty())
    for (int d = 0; d < mesh.ndim(); ++d) dims.push_back(d);  // the default (world) group
  return dims;
}

const std::string& PlanContext::label(int module) const {
  const std::string& fqn = model.modules[module].fqn;
  return fqn.empty() ? model.name : fqn;
}

}  // namespace stratsim::core::planner
