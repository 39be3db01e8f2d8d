#include "stratsim/core/collective_counts.hpp"

#include <map>
#include <tuple>

#include "run_views.hpp"

namespace stratsim::core {

std::vector<CollectiveCount> collective_counts(const Program& program) {
  using Key = std::tuple<int, std::string, Phase, std::string, std::string>;
  std::map<Key, CollectiveCount> rows;
  for (const ProgramOp& op : program.ops) {
    if (op.type != OpType::collective) continue;
    const std::string group = detail::group_name(program, op);
    CollectiveCount& row = rows[Key{op.iteration, op.comm_key, op.phase, op.module, group}];
    if (row.count == 0) row = {op.iteration, op.phase, op.module, group, op.comm_key, op.kind, 0, 0, {}};
    ++row.count;
    row.bytes += op.bytes;
    row.ops.push_back(op.id);
  }
  std::vector<CollectiveCount> out;
  out.reserve(rows.size());
  for (auto& [key, row] : rows) out.push_back(std::move(row));
  return out;
}

}  // namespace stratsim::core
