// DTensor placements and the collectives a redistribution costs (torch.distributed.tensor
// redistribute rules, forward and backward).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace stratsim::core {

struct Placement {
  enum class Kind { replicate, shard, partial };
  Kind kind = Kind::replicate;
  int dim = 0;  // for shard; may be negative until normalised against a tensor rank

  static Placement replicate() { return {Kind::replicate, 0}; }
  static Placement shard(int d) { return {Kind::shard, d}; }
  static Placement partial() { return {Kind::partial, 0}; }
  bool is_shard() const { return kind == Kind::shard; }
  bool is_replicate() const { return kind == Kind::replicate; }
  bool is_partial() const { return kind == Kind::partial; }
  Placement normalized(int tensor_rank) const;
  bool operator==(const Placement&) const = default;
  std::string str() const;  // "Shard(0)", "Replicate()", "Partial()"
};

// Parses "Shard(0)", "Shard(-1)", "Replicate", "Replicate()", "Partial()".
std::optional<Placement> parse_placement(std::string_view text);

// The collective one redistribution from `src` to `dst` runs (tensor of rank `tensor_rank`).
enum class RedistributeOp { none, all_gather, all_reduce, reduce_scatter, all_to_all };
RedistributeOp redistribute_op(Placement src, Placement dst, int tensor_rank);

}  // namespace stratsim::core
