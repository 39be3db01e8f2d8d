// The parity check of `--train`: after the last step, every rank trains the local reference on
// the global batch and compares each parameter it holds with the same slice of it, as PyTorch's
// replicate/fully_shard tests compare against a single-process model. Kept apart from the
// trainer because it must not share the trainer's path: it reads only the final parameters and
// what the plan says about who holds which slice.
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "train_state.hpp"

namespace stratsim::exec::train {
namespace {

std::uint64_t digest_of(const Matrix& m) {
  std::uint64_t hash = 1469598103934665603ULL;  // FNV-1a over the bits
  const auto* bytes = reinterpret_cast<const unsigned char*>(m.data());
  for (Eigen::Index i = 0; i < m.size() * static_cast<Eigen::Index>(sizeof(float)); ++i) {
    hash ^= bytes[i];
    hash *= 1099511628211ULL;
  }
  return hash;
}

// A parameter trains like the local model only if its wrapper averages its gradient over every
// data-parallel dim: one that covers fewer (replicate over "shard" while another wrapper splits
// the batch over "rep" too), or none (ignored_modules), diverges across replicas by design.
bool synchronised(const RankState& state, int p) {
  if (state.dp == 1 || !state.model.params[p].requires_grad) return true;
  const std::vector<int> covered = state.wrapper_dims(p);
  return std::all_of(state.data_dims.begin(), state.data_dims.end(),
                     [&](int d) { return std::find(covered.begin(), covered.end(), d) != covered.end(); });
}

std::string slice_name(const RankState& state, int p) {
  const core::ParamLayout& layout = state.planned.params[p];
  if (!layout.placement.is_shard()) return "full";
  const core::DeviceMesh& mesh = state.program.mesh;
  const std::vector<int> group = mesh.group_ranks(state.rank, layout.tp_dims);
  return fmt::format("{} {}/{} of dim {}", mesh.describe_dims(layout.tp_dims), position_in(group, state.rank) + 1,
                     group.size(), layout.placement.dim);
}

}  // namespace

void check_parity(RankState& state) {
  std::vector<int> optimizer_after;
  for (const core::ProgramOp& op : state.program.ops)
    if (op.role == core::OpRole::optimizer) optimizer_after.push_back(op.iteration);
  const std::int64_t global_rows = state.replica_rows * state.dp;
  const ReferenceRun reference = train_reference(state.model, state.plan.optimizer, state.options.seed,
                                                 state.program.iterations, global_rows, optimizer_after,
                                                 /*record_grads=*/false);
  TrainRecord& record = state.record;
  record.global_rows = global_rows;
  record.output_features = state.output_features;
  record.optimizer_after = optimizer_after;
  record.reference_loss = reference.losses;
  for (std::size_t p = 0; p < state.params.size(); ++p) {
    const int index = static_cast<int>(p);
    HeldParam held;
    held.fqn = state.model.params[p].fqn;
    held.slice = slice_name(state, index);
    held.synchronised = synchronised(state, index);
    const Matrix expected = state.local_slice(index, reference.params[p]);
    const Matrix& actual = state.params[p];
    for (Eigen::Index i = 0; i < actual.size(); ++i) {
      const double a = actual.data()[i], b = expected.data()[i];
      const double diff = std::isnan(a) ? std::numeric_limits<double>::infinity() : std::abs(a - b);
      held.max_abs_diff = std::max(held.max_abs_diff, diff);
      held.max_abs_reference = std::max(held.max_abs_reference, std::abs(b));
      if (!(diff <= state.options.atol + state.options.rtol * std::abs(b))) ++held.mismatches;
    }
    held.digest = digest_of(actual);
    record.params.push_back(std::move(held));
  }
}

}  // namespace stratsim::exec::train
