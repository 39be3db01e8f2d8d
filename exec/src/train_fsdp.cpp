// FSDP (fully_shard) in the training interpreter: each unit's flat shard, its optimizer state and
// its reduced gradient live here; the unsharded parameters are the rank's (RankState) and hold
// values only between the program's all-gather and the next reshard. Freed parameters are NaN, so
// a program that reads them without its all-gather fails the parity check instead of silently
// training on stale weights.
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "train_state.hpp"

namespace stratsim::exec::train {

struct FsdpUnits::Unit {
  const core::FsdpUnitReport* report = nullptr;
  std::vector<int> params;
  int group = -1;  // program group of the shard dims
  int world = 1, position = 0, dp_world = 1;
  bool sharded = true;
  std::vector<float> shard, shard_grad, pending;
  bool has_grad = false;
  OptimizerState optimizer;
};

FsdpUnits::FsdpUnits(RankState& state) : state_(state) {
  for (const core::FsdpUnitReport& report : state_.planned.fsdp) units_.push_back(make_unit(report));
  plan_reshard_after_forward();
}

FsdpUnits::~FsdpUnits() = default;

FsdpUnits::Unit FsdpUnits::make_unit(const core::FsdpUnitReport& report) {
  Unit unit;
  unit.report = &report;
  for (const std::string& fqn : report.params) unit.params.push_back(state_.model.find_param(fqn));
  if (unit.params.empty()) return unit;  // a unit without a handle (its children took everything)
  const core::DeviceMesh& mesh = state_.program.mesh;
  unit.group = state_.group_of(report.group_dims);
  const std::vector<int> members = mesh.group_ranks(state_.rank, report.group_dims);
  unit.world = static_cast<int>(members.size());
  unit.position = position_in(members, state_.rank);
  unit.dp_world = unit.world * mesh.group_size(report.replicate_dims);
  unit.sharded = report.strategy != core::ShardingStrategy::no_shard;
  const std::vector<float> flat = flatten(unit, state_.params);
  if (unit.sharded) {
    unit.shard.assign(flat.begin() + unit.position * report.shard_numel,
                      flat.begin() + (unit.position + 1) * report.shard_numel);
  } else {
    unit.shard = flat;
  }
  return unit;
}

// FULL_SHARD and HYBRID_SHARD free a non-root unit's parameters when its forward returns
// (_post_forward_reshard): poison them after the unit's last forward step, so backward reads
// them only through the program's pre-backward all-gather.
void FsdpUnits::plan_reshard_after_forward() {
  for (std::size_t u = 0; u < units_.size(); ++u) {
    const core::FsdpUnitReport& report = *units_[u].report;
    const bool frees = report.strategy == core::ShardingStrategy::full_shard ||
                       report.strategy == core::ShardingStrategy::hybrid_shard;
    if (report.root || !frees || units_[u].params.empty()) continue;
    if (const auto last = last_forward_step(state_.model, state_.model.find_module(report.module)))
      reshard_after_[*last].push_back(static_cast<int>(u));
  }
}

void FsdpUnits::free_after_construction() {
  for (Unit& unit : units_)
    if (unit.sharded) poison(unit);
}

void FsdpUnits::after_forward_step(int step) {
  auto it = reshard_after_.find(step);
  if (it == reshard_after_.end()) return;
  for (int u : it->second) poison(units_[u]);
}

// The unit's flat parameter or gradient (`tensors` is the rank's params or grads), padded to
// world x shard for sharded strategies.
std::vector<float> FsdpUnits::flatten(const Unit& unit, const std::vector<Matrix>& tensors) const {
  std::vector<float> flat(unit.sharded ? unit.report->padded_numel : unit.report->numel, 0.0f);
  for (std::size_t i = 0; i < unit.params.size(); ++i) {
    const Matrix& tensor = tensors[unit.params[i]];
    std::copy(tensor.data(), tensor.data() + tensor.size(), flat.begin() + unit.report->offsets[i]);
  }
  return flat;
}

void FsdpUnits::unflatten_values(const Unit& unit, const std::vector<float>& flat) {
  for (std::size_t i = 0; i < unit.params.size(); ++i) {
    Matrix& value = state_.params[unit.params[i]];
    std::copy(flat.begin() + unit.report->offsets[i], flat.begin() + unit.report->offsets[i] + value.size(),
              value.data());
  }
}

// Unsharded values are stale once the shard moves on: NaN makes any use before the next
// all-gather visible in the parity check instead of silently reading old weights.
void FsdpUnits::poison(const Unit& unit) {
  for (int p : unit.params) state_.params[p].setConstant(std::numeric_limits<float>::quiet_NaN());
}

void FsdpUnits::refresh_shards() {
  for (Unit& unit : units_) refresh_shard(unit);
}

void FsdpUnits::refresh_shard(Unit& unit) {
  if (unit.params.empty() || std::isnan(state_.params[unit.params.front()](0))) return;  // no handle, or freed
  const std::vector<float> flat = flatten(unit, state_.params);
  if (!unit.sharded) {
    unit.shard = flat;
    return;
  }
  const std::int64_t s = unit.report->shard_numel;
  unit.shard.assign(flat.begin() + unit.position * s, flat.begin() + (unit.position + 1) * s);
}

FsdpUnits::Unit& FsdpUnits::unit_of(const core::ProgramOp& op) {
  if (op.params.empty()) throw std::runtime_error(fmt::format("no parameters"));
  const int unit = state_.planned.params[state_.param_of(op.params.front())].fsdp_unit;
  if (unit < 0) throw std::runtime_error(fmt::format("{} is in no FSDP unit", op.params.front()));
  return units_[unit];
}

void FsdpUnits::unshard(const core::ProgramOp& op) {
  Unit& unit = unit_of(op);
  std::vector<float> full(unit.shard.size() * unit.world);
  state_.collective(op, core::CollectiveKind::all_gather, core::DType::float32, bytes_of(unit.shard), bytes_of(full));
  unflatten_values(unit, full);
}

void FsdpUnits::reduce_grad(const core::ProgramOp& op) {
  Unit& unit = unit_of(op);
  std::vector<float> flat = flatten(unit, state_.grads);
  const double pre = predivide_factor(unit.dp_world);
  if (pre > 1)
    for (float& g : flat) g /= static_cast<float>(pre);
  if (unit.sharded) {
    unit.pending.assign(unit.report->shard_numel, 0.0f);
    state_.collective(op, core::CollectiveKind::reduce_scatter, core::DType::float32, bytes_of(flat),
                      bytes_of(unit.pending));
  } else {
    state_.all_reduce(op, flat);
    unit.pending = std::move(flat);
  }
  for (int p : unit.params) state_.grads[p].setZero();  // the unsharded gradient is freed
  if (unit.report->replicate_dims.empty()) finish_reduction(unit);
}

void FsdpUnits::replicate_grad(const core::ProgramOp& op) {
  Unit& unit = unit_of(op);
  state_.all_reduce(op, unit.pending);
  finish_reduction(unit);
}

// Post-divide, then accumulate into the sharded gradient (kept across no_sync steps).
void FsdpUnits::finish_reduction(Unit& unit) {
  const double post = unit.dp_world / predivide_factor(unit.dp_world);
  if (post > 1)
    for (float& g : unit.pending) g /= static_cast<float>(post);
  if (unit.has_grad) {
    for (std::size_t i = 0; i < unit.pending.size(); ++i) unit.shard_grad[i] += unit.pending[i];
  } else {
    unit.shard_grad = unit.pending;
    unit.has_grad = true;
  }
}

void FsdpUnits::optimizer_step() {
  for (Unit& unit : units_) {
    if (unit.has_grad) train::optimizer_step(state_.plan.optimizer, unit.shard, unit.shard_grad, unit.optimizer);
    unit.has_grad = false;
    // NO_SHARD keeps the parameters as views of the full flat parameter; sharded strategies
    // gather them again before the next use.
    if (unit.sharded) poison(unit);
    else unflatten_values(unit, unit.shard);
  }
}

// FULL_STATE_DICT: one all-gather per sharded unit (not a program op: no timing is recorded).
void FsdpUnits::gather_state_dict() {
  for (Unit& unit : units_) {
    if (!unit.sharded || unit.params.empty()) continue;
    std::vector<float> full(unit.shard.size() * unit.world);
    CollectiveCall call;
    call.kind = core::CollectiveKind::all_gather;
    call.input = bytes_of(unit.shard);
    call.output = bytes_of(full);
    state_.comms.at(unit.group)->run(call);
    unflatten_values(unit, full);
    ++state_.record.state_dict_all_gathers;
  }
}

}  // namespace stratsim::exec::train
