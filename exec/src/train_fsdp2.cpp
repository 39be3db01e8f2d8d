// FSDP2 (torch.distributed.fsdp.fully_shard) in the training interpreter. Each parameter of a group
// is its own Shard(0) DTensor: dim 0 is padded to a multiple of the shard group and the rank holds
// rows [position * S, (position + 1) * S). The all-gather moves the group's shards back to back
// (copy-in), and every rank's segment is split per parameter again (copy-out); the reduce-scatter
// sends, for each rank, that rank's rows of every gradient, so each rank receives the sum of its
// own rows. As in FsdpUnits, freed unsharded parameters are NaN, so a program that reads them
// without its all-gather fails the parity check.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include <fmt/format.h>

#include "train_state.hpp"

namespace stratsim::exec::train {

struct Fsdp2Groups::Group {
  const core::FsdpParamGroupReport* report = nullptr;
  std::vector<int> params;

  int group = -1, world = 1, position = 0, dp_world = 1;
  std::vector<std::vector<float>> shards, shard_grads;  // per parameter: the rank's padded rows
  std::vector<std::vector<float>> post_forward;         // per parameter: the piece kept after forward
  std::vector<float> pending;                           // the reduced rows of the parameters in `reduced`, back to back
  std::vector<std::size_t> reduced;                     // the group's parameters the last reduction covered
  bool has_grad = false;
  std::vector<OptimizerState> optimizer;
};

Fsdp2Groups::Fsdp2Groups(RankState& state) : state_(state) {
  for (const core::FsdpParamGroupReport& report : state_.planned.fsdp2) groups_.push_back(make_group(report));
  plan_reshard_after_forward();
}

Fsdp2Groups::~Fsdp2Groups() = default;

Fsdp2Groups::Group Fsdp2Groups::make_group(const core::FsdpParamGroupReport& report) {
  Group group;
  group.report = &report;
  if (report.params.empty()) return group;  // its submodules' groups took every parameter
  const core::DeviceMesh& mesh = state_.program.mesh;
  group.group = state_.group_of(report.group_dims);
  const std::vector<int> members = mesh.group_ranks(state_.rank, report.group_dims);
  group.world = static_cast<int>(members.size());
  group.position = position_in(members, state_.rank);
  group.dp_world = group.world * mesh.group_size(report.replicate_dims);
  for (const std::string& fqn : report.params) {
    group.params.push_back(state_.param_of(fqn));
  }
  group.shards.resize(group.params.size());
  group.shard_grads.resize(group.params.size());
  group.optimizer.resize(group.params.size());
  refresh(group);
  return group;
}

// The rank's padded rows of each parameter, from the unsharded values.
void Fsdp2Groups::refresh(Group& group) {
  for (std::size_t i = 0; i < group.params.size(); ++i) {
    const Matrix& value = state_.params[group.params[i]];
    if (value.size() > 0 && std::isnan(value.data()[0])) continue;  // freed: its shard is current
    const std::int64_t shard = group.report->shard_numels[i];
    std::vector<float>& out = group.shards[i];
    out.assign(shard, 0.0f);
    const std::int64_t begin = group.position * shard;
    for (std::int64_t k = 0; k < shard && begin + k < value.size(); ++k) out[k] = value.data()[begin + k];
  }
}

void Fsdp2Groups::refresh_shards() {
  for (Group& group : groups_) refresh(group);
}

// A non-root group that reshards after forward frees its parameters after its module's last
// forward step (the root keeps them: reshard_after_forward as the plan ran it).
void Fsdp2Groups::plan_reshard_after_forward() {
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const core::FsdpParamGroupReport& report = *groups_[g].report;
    if (!report.reshard_after_forward || groups_[g].params.empty()) continue;
    if (const auto last = last_forward_step(state_.model, state_.model.find_module(report.module)))
      reshard_after_[*last].push_back(static_cast<int>(g));
  }
}

void Fsdp2Groups::free_after_construction() {
  for (Group& group : groups_) poison(group);
}

void Fsdp2Groups::after_forward_step(int step) {
  auto it = reshard_after_.find(step);
  if (it == reshard_after_.end()) return;
  for (int g : it->second) {
    if (groups_[g].report->post_forward_ranks > 0) keep_post_forward(groups_[g]);
    poison(groups_[g]);
  }
}

// reshard_after_forward=k: the rank keeps piece (position mod k) of each padded unsharded
// parameter cut into k pieces, the piece its post-forward group gathers back in backward.
void Fsdp2Groups::keep_post_forward(Group& group) {
  const int k = group.report->post_forward_ranks;
  const int q = group.position % k;
  group.post_forward.assign(group.params.size(), {});
  for (std::size_t i = 0; i < group.params.size(); ++i) {
    const Matrix& value = state_.params[group.params[i]];
    const std::int64_t piece = group.report->shard_numels[i] * group.world / k;
    std::vector<float>& out = group.post_forward[i];
    out.assign(piece, 0.0f);
    for (std::int64_t e = 0; e < piece && q * piece + e < value.size(); ++e) out[e] = value.data()[q * piece + e];
  }
}

void Fsdp2Groups::poison(const Group& group) {
  for (int p : group.params) state_.params[p].setConstant(std::numeric_limits<float>::quiet_NaN());
}

Fsdp2Groups::Group& Fsdp2Groups::group_of(const core::ProgramOp& op) {
  if (op.params.empty()) throw std::runtime_error("no parameters");
  const int g = state_.planned.params[state_.param_of(op.params.front())].fsdp2_group;
  if (g < 0) throw std::runtime_error(fmt::format("{} is in no FSDP2 group", op.params.front()));
  return groups_[g];
}

bool Fsdp2Groups::owns(const core::ProgramOp& op) const {
  return !op.params.empty() && state_.planned.params[state_.param_of(op.params.front())].fsdp2_group >= 0;
}

// Copy-in: the pieces back to back; all-gather over `ranks` members; copy-out: each rank's
// segment split per parameter, a parameter's rows in rank order, the padding dropped.
void Fsdp2Groups::gather(const Group& group, const std::vector<std::vector<float>>& pieces, int ranks,
                         const std::function<void(CollectiveCall&)>& run) {
  std::vector<float> input;
  for (const std::vector<float>& piece : pieces) input.insert(input.end(), piece.begin(), piece.end());
  const auto segment = static_cast<std::int64_t>(input.size());
  std::vector<float> output(segment * ranks);
  CollectiveCall call;
  call.kind = core::CollectiveKind::all_gather;
  call.input = bytes_of(input);
  call.output = bytes_of(output);
  run(call);
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < group.params.size(); ++i) {
    Matrix& value = state_.params[group.params[i]];
    const auto piece = static_cast<std::int64_t>(pieces[i].size());
    for (int r = 0; r < ranks; ++r)
      for (std::int64_t k = 0; k < piece; ++k) {
        const std::int64_t at = r * piece + k;
        if (at < value.size()) value.data()[at] = output[r * segment + offset + k];
      }
    offset += piece;
  }
}

// The pre-forward gather runs over the shard group from the shards; a pre-backward one after
// reshard_after_forward=k runs over the post-forward group from the post-forward pieces.
void Fsdp2Groups::unshard(const core::ProgramOp& op) {
  Group& group = group_of(op);
  const bool post_forward = op.group != group.group;
  if (post_forward && group.post_forward.empty())
    throw std::runtime_error("an all-gather over the post-forward group, but the group holds no post-forward shards");
  const int ranks = post_forward ? group.report->post_forward_ranks : group.world;
  gather(group, post_forward ? group.post_forward : group.shards, ranks, [&](CollectiveCall& call) {
    state_.collective(op, core::CollectiveKind::all_gather, core::DType::float32, call.input, call.output);
  });
  group.post_forward.clear();  // FSDPParam.to_unsharded frees them
}

// foreach_reduce: for each rank, its rows of every gradient the op names (padded; parameters that
// got no gradient are left out, as PyTorch leaves them), reduce-scattered; each rank keeps the sum
// of its own rows.
void Fsdp2Groups::reduce_grad(const core::ProgramOp& op) {
  Group& group = group_of(op);
  group.reduced.clear();
  std::int64_t segment = 0;
  for (std::size_t i = 0; i < group.params.size(); ++i)
    if (std::find(op.params.begin(), op.params.end(), state_.model.params[group.params[i]].fqn) != op.params.end()) {
      group.reduced.push_back(i);
      segment += group.report->shard_numels[i];
    }
  std::vector<float> input(segment * group.world, 0.0f);
  std::int64_t offset = 0;
  for (const std::size_t i : group.reduced) {
    const Matrix& grad = state_.grads[group.params[i]];
    const std::int64_t shard = group.report->shard_numels[i];
    for (int r = 0; r < group.world; ++r)
      for (std::int64_t k = 0; k < shard; ++k) {
        const std::int64_t at = r * shard + k;
        if (at < grad.size()) input[r * segment + offset + k] = grad.data()[at];
      }
    offset += shard;
  }
  // FSDP2 in float32 reduces with ReduceOp.AVG; FSDP1's pre/post split is the same mean, to rounding.
  const double pre = predivide_factor(group.dp_world);
  if (pre > 1)
    for (float& g : input) g /= static_cast<float>(pre);
  group.pending.assign(segment, 0.0f);
  if (group.world > 1) {
    state_.collective(op, core::CollectiveKind::reduce_scatter, core::DType::float32, bytes_of(input),
                      bytes_of(group.pending));
  } else {
    group.pending = std::move(input);  // one rank: the copy that replaced the reduce-scatter
  }
  for (int p : group.params) state_.grads[p].setZero();  // the unsharded gradient is freed
  if (group.report->replicate_dims.empty()) finish_reduction(group);
}

void Fsdp2Groups::replicate_grad(const core::ProgramOp& op) {
  Group& group = group_of(op);
  state_.all_reduce(op, group.pending);
  finish_reduction(group);
}

void Fsdp2Groups::finish_reduction(Group& group) {
  const double post = group.dp_world / predivide_factor(group.dp_world);
  if (post > 1)
    for (float& g : group.pending) g /= static_cast<float>(post);
  if (!group.has_grad)
    for (std::size_t i = 0; i < group.params.size(); ++i)
      group.shard_grads[i].assign(group.report->shard_numels[i], 0.0f);
  std::int64_t offset = 0;
  for (const std::size_t i : group.reduced) {
    const std::int64_t shard = group.report->shard_numels[i];
    for (std::int64_t k = 0; k < shard; ++k) group.shard_grads[i][k] += group.pending[offset + k];
    offset += shard;
  }
  group.has_grad = true;
}

void Fsdp2Groups::optimizer_step() {
  for (Group& group : groups_) {
    if (group.has_grad)
      for (std::size_t i = 0; i < group.params.size(); ++i) {
        if (!state_.model.params[group.params[i]].requires_grad) continue;
        train::optimizer_step(state_.plan.optimizer, group.shards[i], group.shard_grads[i], group.optimizer[i]);
      }
    group.has_grad = false;
    poison(group);  // the next forward gathers the updated shards
  }
}

// The full parameters after the last step (a full state dict): one all-gather per group, outside
// the program (no timing).
void Fsdp2Groups::gather_state_dict() {
  for (Group& group : groups_) {
    if (group.params.empty()) continue;
    gather(group, group.shards, group.world, [&](CollectiveCall& call) { state_.comms.at(group.group)->run(call); });
    ++state_.record.state_dict_all_gathers;
  }
}

}  // namespace stratsim::exec::train
