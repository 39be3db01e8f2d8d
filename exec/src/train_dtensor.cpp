// DTensor (tensor parallelism) in the training interpreter: the input layouts each parallelised
// module declares, the redistributions the program issues (all-gather, reduce-scatter,
// all-reduce, all-to-all on the activation or its gradient) and the Partial gradients of
// replicated parameters, summed per micro-step. It owns those boundaries and the per-micro-step
// Partial buffers; the activations travel with the trainer, which hands them in.
#include <algorithm>

#include <fmt/format.h>

#include "stratsim/core/errors.hpp"
#include "train_state.hpp"

namespace stratsim::exec::train {
namespace {

using core::Placement;

// The 2-D grid a split along dim `d` of the tensor is a split of rows (0) or columns (1): the
// matrix itself for a [batch, features] tensor and for the features of a sequence tensor; for
// its batch or sequence dim, the [batch, seq * features] view of the same elements.
struct Grid {
  Eigen::Index rows = 0, cols = 0;
  int dim = 0;
};

bool splits_features_or_rows(const Tensor& t, int d) { return t.sequences == 0 || d == 2; }

Grid grid_of(const Tensor& t, int d) {
  if (t.sequences == 0) return {t.value.rows(), t.value.cols(), d};
  if (d == 2) return {t.value.rows(), t.value.cols(), 1};
  return {static_cast<Eigen::Index>(t.sequences), t.value.size() / t.sequences, d};
}

Matrix view(const Matrix& m, Eigen::Index rows, Eigen::Index cols) {
  return Eigen::Map<const Matrix>(m.data(), rows, cols);
}

// A grid back as the tensor's matrix: the matrix itself, or [batch * seq, features] again.
Matrix from_grid(const Tensor& t, int d, Matrix grid) {
  if (splits_features_or_rows(t, d)) return grid;
  return view(grid, grid.size() / t.value.cols(), t.value.cols());
}

// Packs the n chunks along `d` one after another (chunk k is what rank k gets or sends).
std::vector<float> pack_chunks(const Tensor& t, int d, int n) {
  std::vector<float> out;
  out.reserve(static_cast<std::size_t>(t.value.size()));
  for (int k = 0; k < n; ++k) {
    const Tensor piece = chunk_of(t, d, n, k);
    out.insert(out.end(), piece.value.data(), piece.value.data() + piece.value.size());
  }
  return out;
}

// The inverse: n pieces shaped like `piece`, back to back in `flat`, concatenated along `d`.
Tensor unpack_chunks(const std::vector<float>& flat, const Tensor& piece, int d, int n) {
  std::vector<Tensor> pieces;
  for (int k = 0; k < n; ++k)
    pieces.push_back(shaped_like(piece, flat.data() + static_cast<std::size_t>(k * piece.value.size())));
  return concat(pieces, d);
}

}  // namespace

Tensor chunk_of(const Tensor& t, int d, int n, int k) {
  if (t.sequences > 0 && d == 1 && (t.value.rows() / t.sequences) % n != 0)
    throw core::InputError(
        fmt::format("a sequence of {} positions does not split evenly over {} ranks; --train needs "
                    "even shards",
                    t.value.rows() / t.sequences, n));
  const Grid grid = grid_of(t, d);
  Tensor out{from_grid(t, d, chunk(view(t.value, grid.rows, grid.cols), grid.dim, n, k)), t.placement, t.sequences};
  if (t.sequences > 0 && d == 0) out.sequences = t.sequences / n;
  return out;
}

Tensor concat(const std::vector<Tensor>& pieces, int d) {
  const Tensor& first = pieces.front();
  const Grid grid = grid_of(first, d);
  const auto n = static_cast<Eigen::Index>(pieces.size());
  Matrix joined(grid.dim == 0 ? grid.rows * n : grid.rows, grid.dim == 0 ? grid.cols : grid.cols * n);
  for (Eigen::Index k = 0; k < n; ++k) {
    const Matrix block = view(pieces[k].value, grid.rows, grid.cols);
    if (grid.dim == 0) joined.middleRows(k * grid.rows, grid.rows) = block;
    else joined.middleCols(k * grid.cols, grid.cols) = block;
  }
  Tensor out{from_grid(first, d, std::move(joined)), first.placement, first.sequences};
  if (first.sequences > 0 && d == 0) out.sequences = first.sequences * n;
  return out;
}

Tensor shaped_like(const Tensor& like, const float* data) {
  return {Eigen::Map<const Matrix>(data, like.value.rows(), like.value.cols()), like.placement, like.sequences};
}

DtensorLayouts::DtensorLayouts(RankState& state) : state_(state) {
  const core::Model& model = state_.model;
  for (const core::ProgramOp& op : state_.program.ops)
    if (op.role == core::OpRole::tp_param_grad)
      for (const std::string& fqn : op.params) partial_grads_.emplace(model.find_param(fqn), Matrix());
  for (auto& [p, grad] : partial_grads_) grad = Matrix::Zero(state_.params[p].rows(), state_.params[p].cols());
  // A boundary on a container is checked where its input first meets a leaf.
  const std::vector<core::ForwardStep> steps = core::flat_forward(model);
  for (const core::TpBoundary& boundary : state_.planned.tp_inputs)
    for (const core::ForwardStep& step : steps)
      if (step.kind == core::ForwardStep::Kind::child && model.in_subtree(step.index, boundary.module)) {
        boundaries_[step.index].push_back(boundary);
        break;
      }
}

Style DtensorLayouts::style_of(const core::Module& module) const {
  if (module.leaf != core::LeafKind::linear || module.params.empty()) return Style::plain;
  const Placement weight = state_.planned.params[module.params[0]].placement;
  if (!weight.is_shard()) return Style::plain;
  return weight.dim == 0 ? Style::colwise : Style::rowwise;
}

void DtensorLayouts::localize(Tensor& tensor, Placement wanted) const {
  if (tensor.placement.is_replicate() && wanted.is_shard()) {
    tensor = chunk_of(tensor, wanted.dim, state_.tp, state_.tp_position);
    tensor.placement = wanted;
  }
}

// DTensor.from_local trusts the declared layout: an activation laid out otherwise is
// mislabelled (PyTorch then fails on shapes or computes on the wrong shard), so it is refused.
// Declared Replicate, computed Shard: the local chunk, no collective (DTensor does the same).
void DtensorLayouts::enter_boundaries(const core::ProgramOp& op, int leaf, Tensor& activation) const {
  auto it = boundaries_.find(leaf);
  if (it == boundaries_.end()) return;
  for (const core::TpBoundary& boundary : it->second) {
    if (activation.placement == boundary.desired) continue;  // the program's tp_input already moved it
    const std::string name = state_.model.modules[boundary.module].fqn;
    state_.expect(op, activation.placement == boundary.declared,
                  fmt::format("\"{}\" declares its input {} but receives a {} activation", name,
                              boundary.declared.str(), activation.placement.str()));
    state_.expect(op, boundary.declared.is_replicate() && boundary.desired.is_shard(),
                  fmt::format("\"{}\" needs its input moved from {} to {} and the program has no collective for it",
                              name, boundary.declared.str(), boundary.desired.str()));
    localize(activation, boundary.desired);
  }
}

void DtensorLayouts::redistribute_op(const core::ProgramOp& op, Tensor& tensor) {
  if (op.phase == core::Phase::recompute) return replay_collective(op);
  state_.expect(
      op, tensor.placement == op.from,
      fmt::format("the program redistributes from {} but the tensor is {}", op.from.str(), tensor.placement.str()));
  tensor = redistribute(op, std::move(tensor), op.from, op.to);
  tensor.placement = op.to;
}

// A recomputed forward's collectives move buffers of the program's sizes: their values equal
// the saved forward's, which the backward already uses.
void DtensorLayouts::replay_collective(const core::ProgramOp& op) {
  std::vector<std::byte> input(static_cast<std::size_t>(op.input_bytes)),
      output(static_cast<std::size_t>(op.output_bytes));
  const bool in_place = op.kind == core::CollectiveKind::all_reduce || op.kind == core::CollectiveKind::broadcast;
  state_.collective(op, op.kind, op.dtype, input,
                    in_place ? std::span<std::byte>(input) : std::span<std::byte>(output));
}

Tensor DtensorLayouts::redistribute(const core::ProgramOp& op, Tensor local, Placement from, Placement to) {
  const int n = state_.comm_of(op).size();
  if (from.is_partial() && to.is_replicate()) {
    state_.all_reduce(op, span_of(local.value));
    return local;
  }
  if (from.is_shard() && to.is_replicate()) {
    std::vector<float> gathered(static_cast<std::size_t>(local.value.size()) * n);
    state_.collective(op, core::CollectiveKind::all_gather, core::DType::float32, bytes_of(span_of(local.value)),
                      bytes_of(gathered));
    return unpack_chunks(gathered, local, from.dim, n);
  }
  if (from.is_partial() && to.is_shard()) {
    std::vector<float> packed = pack_chunks(local, to.dim, n);
    Tensor out = chunk_of(local, to.dim, n, 0);  // shape of one chunk
    state_.collective(op, core::CollectiveKind::reduce_scatter, core::DType::float32, bytes_of(packed),
                      bytes_of(span_of(out.value)));
    return out;
  }
  if (from.is_shard() && to.is_shard() && from.dim != to.dim && op.kind == core::CollectiveKind::all_gather)
    // PyTorch before 2.4: gather the whole tensor (Shard -> Replicate), keep this rank's chunk.
    return chunk_of(redistribute(op, std::move(local), from, Placement::replicate()), to.dim, n, state_.tp_position);
  if (from.is_shard() && to.is_shard() && from.dim != to.dim) {
    // Send chunk k along the new dim to rank k; what arrives stacks along the old dim.
    std::vector<float> packed = pack_chunks(local, to.dim, n);
    std::vector<float> received(packed.size());
    state_.collective(op, core::CollectiveKind::all_to_all, core::DType::float32, bytes_of(packed), bytes_of(received));
    return unpack_chunks(received, chunk_of(local, to.dim, n, 0), from.dim, n);
  }
  throw std::runtime_error(fmt::format("no redistribution from {} to {}", from.str(), to.str()));
}

// A replicated parameter applied to sharded rows has a Partial gradient: summed, not averaged.
void DtensorLayouts::sum_partial_grad(const core::ProgramOp& op) {
  if (op.params.empty()) throw std::runtime_error(fmt::format("no parameter"));
  const int p = state_.param_of(op.params.front());
  Matrix& partial = partial_grads_.at(p);
  state_.all_reduce(op, span_of(partial));
  state_.grads[p] += partial;
  partial.setZero();
}

void DtensorLayouts::distribute(const core::ProgramOp& op) {
  if (op.params.empty()) throw std::runtime_error(fmt::format("no parameter"));
  const int p = state_.param_of(op.params.front());
  Matrix& local = state_.params[p];
  std::span<float> mine = span_of(local);
  if (op.kind == core::CollectiveKind::broadcast)
    return state_.collective(op, op.kind, core::DType::float32, bytes_of(mine), bytes_of(mine));
  Communicator& comm = state_.comm_of(op);
  const int n = comm.size();
  std::vector<float> whole(local.size() * static_cast<std::size_t>(n));
  if (comm.rank() == 0) {
    // The root holds the full parameter (as it was initialised) and sends member k its chunk k.
    // Initialised once for all the distributions, not once per parameter.
    if (initial_params_.empty()) initial_params_ = init_parameters(state_.model, state_.options.seed);
    const Matrix& full = initial_params_[static_cast<std::size_t>(p)];
    const core::Placement placement = state_.planned.params[p].placement;
    const int dim = full.rows() == 1 && state_.model.params[p].shape.size() == 1 ? 1 : placement.dim;
    for (int k = 0; k < n; ++k) {
      const Matrix piece = chunk(full, dim, n, k);
      std::copy(piece.data(), piece.data() + piece.size(),
                whole.begin() + static_cast<std::ptrdiff_t>(k * piece.size()));
    }
  }
  std::vector<float> received(local.size());
  state_.collective(op, op.kind, core::DType::float32, bytes_of(whole), bytes_of(received));
  std::copy(received.begin(), received.end(), local.data());
}

// .grad, or for a Partial gradient this micro-step's own buffer, summed over the tp group
// (from_local's backward) before it joins .grad: summing .grad itself would multiply what earlier
// micro-steps accumulated.
Matrix* DtensorLayouts::grad_target(int p) {
  if (!state_.model.params[p].requires_grad) return nullptr;
  auto it = partial_grads_.find(p);
  return it != partial_grads_.end() ? &it->second : &state_.grads[p];
}

}  // namespace stratsim::exec::train
