#include "stratsim/core/placement.hpp"

#include <charconv>

#include <fmt/format.h>

namespace stratsim::core {

Placement Placement::normalized(int tensor_rank) const {
  if (kind != Kind::shard || dim >= 0) return *this;
  return shard(dim + tensor_rank);
}

std::string Placement::str() const {
  switch (kind) {
    case Kind::replicate: return "Replicate()";
    case Kind::partial: return "Partial()";
    case Kind::shard: return fmt::format("Shard({})", dim);
  }
  return "?";
}

std::optional<Placement> parse_placement(std::string_view text) {
  if (text == "Replicate" || text == "Replicate()") return Placement::replicate();
  if (text == "Partial" || text == "Partial()") return Placement::partial();
  if (text.starts_with("Shard(") && text.ends_with(")")) {
    std::string_view number = text.substr(6, text.size() - 7);
    int dim = 0;
    auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), dim);
    if (error == std::errc() && end == number.data() + number.size()) return Placement::shard(dim);
  }
  return std::nullopt;
}

RedistributeOp redistribute_op(Placement src, Placement dst, int tensor_rank) {
  src = src.normalized(tensor_rank);
  dst = dst.normalized(tensor_rank);
  if (src == dst) return RedistributeOp::none;
  switch (src.kind) {
    case Placement::Kind::shard:
      if (dst.is_replicate()) return RedistributeOp::all_gather;
      if (dst.is_shard()) return RedistributeOp::all_to_all;
      return RedistributeOp::none;  // Shard -> Partial is never requested by the styles we model
    case Placement::Kind::partial:
      return dst.is_replicate() ? RedistributeOp::all_reduce : RedistributeOp::reduce_scatter;
    case Placement::Kind::replicate:
      return RedistributeOp::none;  // local chunk, or local scaling for Partial
  }
  return RedistributeOp::none;
}

}  // namespace stratsim::core
