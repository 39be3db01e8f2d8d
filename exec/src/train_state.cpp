// What one training rank holds, shared by every parallelism's part (train_state.hpp): where its
// rows of the batch come from, its parameters and gradients, its communicators and the record it
// fills. Kept apart from the trainer so that DDP, FSDP and DTensor read the same tensors without
// reaching into each other's state.
#include "train_state.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "stratsim/core/errors.hpp"

namespace stratsim::exec::train {

using core::Placement;

std::span<std::byte> bytes_of(std::span<float> values) { return std::as_writable_bytes(values); }
std::span<float> span_of(Matrix& m) { return {m.data(), static_cast<std::size_t>(m.size())}; }

Matrix chunk(const Matrix& m, int d, int n, int k) {
  const Eigen::Index extent = d == 0 ? m.rows() : m.cols();
  if (extent % n != 0)
    throw core::InputError(
        fmt::format("--train: a {}x{} tensor does not split evenly {} ways along dim {} (DTensor "
                    "would pad it; the parity check needs even shards)",
                    m.rows(), m.cols(), n, d));
  if (d == 0) {
    const Eigen::Index rows = m.rows() / n;
    return m.middleRows(k * rows, rows);
  }
  const Eigen::Index cols = m.cols() / n;
  return m.middleCols(k * cols, cols);
}

double predivide_factor(int world) {
  int factor = 1;
  while (world % factor == 0 && world / factor > factor) factor *= 2;
  return factor;
}

std::optional<int> last_forward_step(const core::Model& model, int module) {
  std::optional<int> last;
  for (const core::ForwardStep& step : core::flat_forward(model)) {
    const int key = step.kind == core::ForwardStep::Kind::child ? step.index : -(step.index + 1);
    const int owner = key >= 0 ? key : model.params[-key - 1].module;
    if (model.in_subtree(owner, module)) last = key;
  }
  return last;
}

int position_in(const std::vector<int>& members, int rank) {
  return static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
}

RankState::RankState(const core::Model& model, const core::Plan& plan, const core::PlanResult& planned,
                     Backend& backend, const TrainOptions& options)
    : model(model),
      plan(plan),
      planned(planned),
      program(planned.program),
      backend(backend),
      options(options),
      rank(backend.rank()) {
  record.rank = rank;
  record.timing.rank = rank;
  const core::DeviceMesh& mesh = program.mesh;
  // Gradients are averaged over the data-parallel dims: ranks that differ there see different rows.
  for (const auto& ddp : planned.ddp) add_data_dims(ddp.group_dims);
  for (const auto& unit : planned.fsdp) {
    add_data_dims(unit.group_dims);
    add_data_dims(unit.replicate_dims);
  }
  for (const auto& group : planned.fsdp2) {
    add_data_dims(group.group_dims);
    add_data_dims(group.replicate_dims);
  }
  std::sort(data_dims.begin(), data_dims.end());
  const std::vector<int> data_group = mesh.group_ranks(rank, data_dims);
  dp = static_cast<int>(data_group.size());
  dp_position = position_in(data_group, rank);
  tp_dims = planned.input_dims;
  const std::vector<int> tp_group = mesh.group_ranks(rank, tp_dims);
  tp = static_cast<int>(tp_group.size());
  tp_position = position_in(tp_group, rank);
  // DTensor.from_local: a sharded input is this rank's piece, so the replica's input is tp pieces
  // along that dim; a sequence model's rows are (sample, position) pairs.
  const std::int64_t seq = plan.sequence_length(model.seq_len);
  replica_sequences = plan.batch_size * (planned.input_placement == Placement::shard(0) ? tp : 1);
  if (seq > 0) sequence = seq * (planned.input_placement == Placement::shard(1) ? tp : 1);
  replica_rows = replica_sequences * std::max<std::int64_t>(sequence, 1);
  output_features = train::output_features(model);

  params = init_parameters(model, options.seed);
  for (std::size_t p = 0; p < params.size(); ++p) params[p] = local_slice(static_cast<int>(p), params[p]);
  perturb_unsynced_copies();
  grads.resize(params.size());
  for (std::size_t p = 0; p < params.size(); ++p) grads[p] = Matrix::Zero(params[p].rows(), params[p].cols());
  for (std::size_t p = 0; p < model.params.size(); ++p) param_index.emplace(model.params[p].fqn, static_cast<int>(p));
}

void RankState::add_data_dims(const std::vector<int>& dims) {
  for (int d : dims)
    if (std::find(data_dims.begin(), data_dims.end(), d) == data_dims.end()) data_dims.push_back(d);
}

// Module-state broadcasts (DDP init_sync, FSDP sync_module_states) only matter if ranks start
// different: every copy the plan promises to overwrite from the group's first rank starts
// doubled, so a program that forgets a broadcast (or its parameters) trains a different model.
void RankState::perturb_unsynced_copies() {
  const std::vector<int> coordinate = program.mesh.coordinate(rank);
  // distribute_tensor overwrites every tp member's copy from the group's first rank.
  std::vector<bool> distributed(params.size(), false);
  for (const core::ProgramOp& op : program.ops)
    if (op.role == core::OpRole::tp_distribute && !op.params.empty())
      if (const int p = model.find_param(op.params.front()); p >= 0) distributed[static_cast<std::size_t>(p)] = true;
  for (std::size_t p = 0; p < params.size(); ++p) {
    const core::ParamLayout& layout = planned.params[p];
    if (distributed[p] &&
        std::any_of(layout.tp_dims.begin(), layout.tp_dims.end(), [&](int d) { return coordinate[d] != 0; })) {
      params[p] *= 2.0f;
      continue;
    }
    const bool synced = (layout.ddp >= 0 && planned.ddp[layout.ddp].init_sync) ||
                        (layout.fsdp_unit >= 0 && planned.fsdp[layout.fsdp_unit].sync_module_states);
    const std::vector<int> dims = synced ? wrapper_dims(static_cast<int>(p)) : std::vector<int>{};
    if (std::any_of(dims.begin(), dims.end(), [&](int d) { return coordinate[d] != 0; })) params[p] *= 2.0f;
  }
}

std::vector<int> RankState::wrapper_dims(int p) const {
  const core::ParamLayout& layout = planned.params[p];
  if (layout.ddp >= 0) return planned.ddp[layout.ddp].group_dims;
  if (layout.fsdp2_group >= 0) {
    std::vector<int> dims = planned.fsdp2[layout.fsdp2_group].group_dims;
    const std::vector<int>& replicas = planned.fsdp2[layout.fsdp2_group].replicate_dims;
    dims.insert(dims.end(), replicas.begin(), replicas.end());
    return dims;
  }
  if (layout.fsdp_unit < 0) return {};
  std::vector<int> dims = planned.fsdp[layout.fsdp_unit].group_dims;
  const std::vector<int>& replicas = planned.fsdp[layout.fsdp_unit].replicate_dims;
  dims.insert(dims.end(), replicas.begin(), replicas.end());
  return dims;
}

Matrix RankState::local_slice(int p, const Matrix& full) const {
  const core::ParamLayout& layout = planned.params[p];
  if (!layout.placement.is_shard()) return full;
  const std::vector<int> group = program.mesh.group_ranks(rank, layout.tp_dims);
  const int dim = full.rows() == 1 && model.params[p].shape.size() == 1 ? 1 : layout.placement.dim;
  return chunk(full, dim, static_cast<int>(group.size()), position_in(group, rank));
}

int RankState::group_of(const std::vector<int>& dims) const {
  for (std::size_t g = 0; g < program.groups.size(); ++g)
    if (program.groups[g].mesh_dims == dims && program.groups[g].block_size == 0) return static_cast<int>(g);
  throw std::runtime_error(fmt::format("the program has no group over mesh dims {}", program.mesh.describe_dims(dims)));
}

void RankState::connect() {
  for (std::size_t g = 0; g < program.groups.size(); ++g) {
    const int group = static_cast<int>(g);
    const std::string key = fmt::format("train.g{}.i{}", g, program.group_index(group, rank));
    comms.push_back(backend.communicator(key, program.group_ranks(group, rank)));
  }
}

int RankState::param_of(const std::string& fqn) const {
  auto it = param_index.find(fqn);
  if (it == param_index.end()) throw std::runtime_error(fmt::format("the program names an unknown parameter {}", fqn));
  return it->second;
}

void RankState::collective(const core::ProgramOp& op, core::CollectiveKind kind, core::DType dtype,
                           std::span<std::byte> input, std::span<std::byte> output, int root) {
  Communicator& comm = comm_of(op);
  CollectiveCall call;
  call.kind = kind;
  call.dtype = dtype;
  call.input = input;
  call.output = output;
  call.root = root;
  comm.run(call);
  record.timing.algorithms[op.id] = comm.algorithm(kind);
}

void RankState::all_reduce(const core::ProgramOp& op, std::span<float> values) {
  collective(op, core::CollectiveKind::all_reduce, core::DType::float32, bytes_of(values), bytes_of(values));
}

void RankState::expect(const core::ProgramOp& op, bool condition, const std::string& what) const {
  if (!condition) throw OpFailure(fmt::format("op {} \"{}\": {}", op.id, op.name, what));
}

}  // namespace stratsim::exec::train
