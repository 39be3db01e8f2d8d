// DDP (replicate) in the training interpreter: the construction checks (parameter counts and
// shapes across ranks, rebuilt bucket layouts), the module-state broadcast and the gradient
// buckets, averaged on copy-in as the Reducer does. It owns which parameters each DDP instance
// replicates; the gradients themselves are the rank's (RankState), so a bucket that misses a
// parameter leaves that gradient unaveraged and the parity check sees it.
#include <fmt/format.h>
#include <Eigen/Core>

#include "train_state.hpp"

namespace stratsim::exec::train {

using core::OpRole;

DdpReplicas::DdpReplicas(RankState& state) : state_(state) {
  for (std::size_t i = 0; i < state_.planned.ddp.size(); ++i) {
    params_.emplace_back();
    for (std::size_t p = 0; p < state_.planned.params.size(); ++p)
      if (state_.planned.params[p].ddp == static_cast<int>(i)) params_.back().push_back(static_cast<int>(p));
  }
}

// The DDP instance a DDP op belongs to: replicate() on the op's module.
std::size_t DdpReplicas::instance_of(const core::ProgramOp& op) const {
  for (std::size_t i = 0; i < state_.planned.ddp.size(); ++i)
    if (state_.planned.ddp[i].module == op.module) return i;
  throw std::runtime_error(fmt::format("no replicate() on module \"{}\"", op.module));
}

// _verify_param_shape_across_processes, part 1: every rank holds the same number of parameters.
void DdpReplicas::param_count(const core::ProgramOp& op) {
  const int size = state_.comm_of(op).size();
  std::int64_t mine = static_cast<std::int64_t>(params_[instance_of(op)].size());
  std::vector<std::int64_t> counts(size);
  state_.collective(op, core::CollectiveKind::all_gather, core::DType::int64,
                    std::as_writable_bytes(std::span(&mine, 1)), std::as_writable_bytes(std::span(counts)));
  for (int r = 0; r < size; ++r)
    if (counts[r] != mine)
      throw std::runtime_error(
          fmt::format("DDP expects same model across all ranks, but Rank {} has {} params, "
                      "while rank {} has inconsistent {} params.",
                      state_.rank, mine, r, counts[r]));
}

// Part 2: rank 0's shapes and strides, checked by everyone.
void DdpReplicas::param_shapes(const core::ProgramOp& op) {
  std::vector<std::int64_t> mine;
  for (int p : params_[instance_of(op)]) {
    const std::vector<std::int64_t>& shape = state_.planned.params[p].local_shape;
    mine.insert(mine.end(), shape.begin(), shape.end());
    std::int64_t stride = 1;
    std::vector<std::int64_t> strides(shape.size());
    for (std::size_t d = shape.size(); d-- > 0;) {
      strides[d] = stride;
      stride *= shape[d];
    }
    mine.insert(mine.end(), strides.begin(), strides.end());
  }
  std::vector<std::int64_t> received = mine;
  auto buffer = std::as_writable_bytes(std::span(received));
  state_.collective(op, core::CollectiveKind::broadcast, core::DType::int64, buffer, buffer);
  if (received != mine)
    throw std::runtime_error(
        fmt::format("DDP expects same model across all ranks, but rank {}'s parameter shapes "
                    "differ from rank 0's",
                    state_.rank));
}

// FSDP's sync_module_states is the same broadcast; its shards are refreshed by the caller.
void broadcast_module_states(RankState& state, const core::ProgramOp& op) {
  std::vector<float> flat;
  std::vector<int> params;
  for (const std::string& fqn : op.params) params.push_back(state.param_of(fqn));
  for (int p : params) flat.insert(flat.end(), state.params[p].data(), state.params[p].data() + state.params[p].size());
  state.collective(op, core::CollectiveKind::broadcast, core::DType::float32, bytes_of(flat), bytes_of(flat));
  std::size_t at = 0;
  for (int p : params) {
    std::copy(flat.begin() + at, flat.begin() + at + state.params[p].size(), state.params[p].data());
    at += state.params[p].size();
  }
}

// sync_bucket_indices: rank 0's rebuilt layout, checked against this rank's.
void DdpReplicas::bucket_layout(const core::ProgramOp& op) {
  const core::DdpReport& report = state_.planned.ddp[instance_of(op)];
  std::vector<std::int32_t> mine;
  if (op.role == OpRole::ddp_bucket_indices) {
    for (const core::DdpBucket& bucket : report.rebuilt)
      mine.insert(mine.end(), bucket.indices.begin(), bucket.indices.end());
    mine.push_back(static_cast<std::int32_t>(report.rebuilt.size()));
  } else {
    for (const core::DdpBucket& bucket : report.rebuilt)
      mine.push_back(static_cast<std::int32_t>(bucket.indices.size()));
  }
  std::vector<std::int32_t> received = mine;
  received.resize(static_cast<std::size_t>(op.input_bytes / 4), 0);
  auto buffer = std::as_writable_bytes(std::span(received));
  state_.collective(op, core::CollectiveKind::broadcast, core::DType::int32, buffer, buffer);
  received.resize(mine.size());
  if (received != mine)
    throw std::runtime_error(fmt::format("rank {} rebuilt its DDP buckets differently from rank 0", state_.rank));
}

// find_unused_parameters: every parameter of these models is used on every rank.
void DdpReplicas::used_map(const core::ProgramOp& op) {
  std::vector<std::int32_t> used(static_cast<std::size_t>(op.input_bytes / 4), 1);
  auto buffer = std::as_writable_bytes(std::span(used));
  state_.collective(op, core::CollectiveKind::all_reduce, core::DType::int32, buffer, buffer);
  const int size = state_.comm_of(op).size();
  for (std::int32_t count : used)
    if (count != size) throw std::runtime_error("a parameter went unused on some rank");
}

// One bucket: gradients copied in bucket order, averaged over the group (Reducer divides on
// copy-in; the compress hooks divide the low-precision copy), written back to .grad.
void DdpReplicas::bucket(const core::ProgramOp& op) {
  const int size = state_.comm_of(op).size();
  std::vector<Matrix>& grads = state_.grads;
  std::vector<int> params;
  for (const std::string& fqn : op.params) params.push_back(state_.param_of(fqn));
  std::vector<float> flat;
  for (int p : params) flat.insert(flat.end(), grads[p].data(), grads[p].data() + grads[p].size());
  const core::CommHook hook = state_.planned.ddp[instance_of(op)].comm_hook;
  if (hook == core::CommHook::fp16_compress) {
    compressed_all_reduce<Eigen::half>(op, flat, size, core::DType::float16);
  } else if (hook == core::CommHook::bf16_compress) {
    compressed_all_reduce<Eigen::bfloat16>(op, flat, size, core::DType::bfloat16);
  } else {
    const float inverse = 1.0f / static_cast<float>(size);
    for (float& g : flat) g *= inverse;
    state_.all_reduce(op, flat);
  }
  std::size_t at = 0;
  for (int p : params) {
    std::copy(flat.begin() + at, flat.begin() + at + grads[p].size(), grads[p].data());
    at += grads[p].size();
  }
}

// fp16/bf16_compress_hook: cast the bucket down, divide by the group size in that precision,
// all-reduce, cast back. Gloo 0.5 sums float16 natively; it has no bfloat16 type, so bf16
// buckets are summed as float32 and rounded to bf16 again (NCCL would accumulate in bf16).
template <typename Half>
void DdpReplicas::compressed_all_reduce(const core::ProgramOp& op, std::vector<float>& flat, int size,
                                        core::DType dtype) {
  std::vector<Half> compressed(flat.size());
  for (std::size_t i = 0; i < flat.size(); ++i)
    compressed[i] = Half(static_cast<float>(Half(flat[i])) / static_cast<float>(size));
  if (dtype == core::DType::float16) {
    auto buffer = std::as_writable_bytes(std::span(compressed));
    state_.collective(op, core::CollectiveKind::all_reduce, dtype, buffer, buffer);
    for (std::size_t i = 0; i < flat.size(); ++i) flat[i] = static_cast<float>(compressed[i]);
    return;
  }
  for (std::size_t i = 0; i < flat.size(); ++i) flat[i] = static_cast<float>(compressed[i]);
  state_.all_reduce(op, flat);
  for (float& g : flat) g = static_cast<float>(Half(g));
}

}  // namespace stratsim::exec::train
