// Folding planner: see fold.hpp for what a fold is and why it preserves the timings.
#include "fold.hpp"

#include <algorithm>
#include <map>
#include <optional>

#include <fmt/format.h>

namespace stratsim::sim::detail {
namespace {

using core::Program;

// Why a candidate K does not fold, or nothing.
using Verdict = std::optional<std::string>;

struct Geometry {
  int gpus_per_node = 1;
  int nodes_per_leaf = 1;
  int total_nodes = 1;  // nodes the job spans
  bool multi_leaf = false;
  int node(int rank) const { return rank / gpus_per_node; }
  int leaf(int rank) const { return node(rank) / nodes_per_leaf; }
};

// Checks one full instance against the fold and returns its image (the simulated instance's
// ranks) through `image`.
Verdict fold_instance(const std::vector<int>& members, int folded_size, int folded_ranks, int k, const Geometry& geo,
                      std::vector<int>& image) {
  const int p = static_cast<int>(members.size());
  image.clear();
  for (int j = 0; j < folded_size; ++j) image.push_back(members[j] % folded_ranks);
  // The members of each block of folded_size are those of the first block shifted by the same
  // number of simulated worlds, so the instance is the first block repeated along the job.
  if (folded_size < p) {
    const int stride = members[folded_size] - members[0];
    if (stride <= 0 || stride % folded_ranks != 0)
      return fmt::format("its members do not repeat every {} ranks", folded_ranks);
    for (int j = 0; j + folded_size < p; ++j)
      if (members[j + folded_size] - members[j] != stride)
        return fmt::format("its members do not repeat every {} ranks", folded_ranks);
  }
  // The first block must fit in K nodes so its nodes stay distinct after the fold.
  int low = geo.node(members[0]), high = low;
  for (int j = 0; j < folded_size; ++j) {
    low = std::min(low, geo.node(members[j]));
    high = std::max(high, geo.node(members[j]));
  }
  if (high - low >= k) return fmt::format("one block of it spans {} nodes, not fewer than {}", high - low + 1, k);
  // Its leaves must stay distinct too (nodes 3 and 8 under leaves of 4 fold onto one leaf of 8).
  const int leaves = k / geo.nodes_per_leaf;
  if (geo.multi_leaf && high / geo.nodes_per_leaf - low / geo.nodes_per_leaf >= leaves)
    return fmt::format("one block of it spans more than {} leaf switches", leaves);
  // The hop from one block into the next crosses the spine; after the fold it must still do so.
  if (folded_size < p && geo.multi_leaf && folded_size > 1 &&
      geo.leaf(members[0]) == geo.leaf(members[folded_size - 1]))
    return std::string("one block of it sits under one leaf switch");
  return std::nullopt;
}

Verdict fold_group(const Program& program, int group, int k, const Geometry& geo, SimulatedGroup& out) {
  const std::vector<std::vector<int>> full = program.all_groups(group);
  const int p = program.groups[group].size;
  const int folded_ranks = k * geo.gpus_per_node;
  const auto fail = [&](const std::string& why) {
    return fmt::format("group {} ({} members): {}", program.groups[group].name, p, why);
  };
  // Members per block: up to the first member that lands on the first one's simulated rank.
  const std::vector<int>& first = full.front();
  int folded_size = 1;
  while (folded_size < p && first[folded_size] % folded_ranks != first[0] % folded_ranks) ++folded_size;
  if (p % folded_size != 0) return fail(fmt::format("its members do not repeat every {} ranks", folded_ranks));
  if (folded_size < 2 && p > 1) return fail(fmt::format("{} nodes hold fewer than 2 of its members", k));

  out = SimulatedGroup{};
  out.full_size = p;
  std::map<int, int> by_first_rank;
  std::vector<int> owner(folded_ranks, -1);
  std::vector<int> image;
  for (int i = 0; i < static_cast<int>(full.size()); ++i) {
    if (Verdict why = fold_instance(full[i], folded_size, folded_ranks, k, geo, image)) return fail(*why);
    auto [it, inserted] = by_first_rank.try_emplace(image.front(), static_cast<int>(out.instances.size()));
    if (inserted) {
      for (int rank : image) {
        if (owner[rank] >= 0) return fail(fmt::format("its folded instances overlap at rank {}", rank));
        owner[rank] = it->second;
      }
      out.instances.push_back(image);
      out.stands_for.emplace_back();
    } else if (out.instances[it->second] != image) {
      return fail(fmt::format("its folded instances overlap at rank {}", image.front()));
    }
    out.stands_for[it->second].push_back(i);
  }
  return std::nullopt;
}

// Every collective on a group that folds must run an algorithm with a folded schedule, and so must
// one whose whole group is simulated but spans nodes: only the folding algorithms load the fabric
// the same way on the folded cluster (a direct scatter from one root across nodes shares spine
// links differently with fewer nodes, and its instances would finish at different times).
Verdict check_algorithms(const Program& program, const Folding& folding, const AlgorithmOf& algorithm_of,
                         const Geometry& geo) {
  std::map<std::tuple<int, std::int64_t, int, int>, bool> checked;
  for (const core::ProgramOp& op : program.ops) {
    if (op.type != core::OpType::collective) continue;
    const SimulatedGroup& group = folding.groups[op.group];
    for (int s = 0; s < static_cast<int>(group.instances.size()); ++s) {
      const std::vector<int>& members = group.instances[s];
      const bool one_node = geo.node(members.front()) == geo.node(members.back());
      if (static_cast<int>(members.size()) == group.full_size && one_node) continue;
      auto [it, fresh] = checked.try_emplace({static_cast<int>(op.kind), op.bytes, op.group, s}, true);
      if (!fresh) continue;
      const Algorithm algorithm = algorithm_of(op, group.stands_for[s].front());
      if (!folds(op.kind, algorithm))
        return fmt::format("op {} \"{}\" runs {} {} over {} members, which does not fold", op.id, op.name,
                           algorithm_name(algorithm), core::collective_kind_name(op.kind), group.full_size);
    }
  }
  return std::nullopt;
}

std::vector<int> fold_candidates(const Geometry& geo) {
  std::vector<int> candidates;
  for (int k = 2; k < geo.total_nodes; ++k) {
    if (geo.total_nodes % k != 0) continue;
    if (geo.multi_leaf && (k % geo.nodes_per_leaf != 0 || k < 2 * geo.nodes_per_leaf)) continue;
    candidates.push_back(k);
  }
  return candidates;
}

}  // namespace

Folding no_folding(const Program& program) {
  Folding folding;
  folding.ranks = program.world_size;
  for (int group = 0; group < static_cast<int>(program.groups.size()); ++group) {
    SimulatedGroup simulated;
    simulated.full_size = program.groups[group].size;
    simulated.instances = program.all_groups(group);
    for (int i = 0; i < static_cast<int>(simulated.instances.size()); ++i) simulated.stands_for.push_back({i});
    folding.groups.push_back(std::move(simulated));
  }
  return folding;
}

Folding plan_folding(const Program& program, const PlatformSpec& platform, const AlgorithmOf& algorithm_of) {
  Folding unfolded = no_folding(program);
  if (platform.kind != PlatformKind::cluster) return unfolded;
  Geometry geo;
  geo.gpus_per_node = platform.gpus_per_node;
  geo.nodes_per_leaf = platform.nodes_per_leaf;
  if (program.world_size % geo.gpus_per_node != 0) {
    unfolded.note =
        fmt::format("not folded: {} ranks do not fill whole nodes of {}", program.world_size, geo.gpus_per_node);
    return unfolded;
  }
  geo.total_nodes = program.world_size / geo.gpus_per_node;
  geo.multi_leaf = geo.total_nodes > geo.nodes_per_leaf;
  unfolded.total_nodes = geo.total_nodes;
  const std::vector<int> candidates = fold_candidates(geo);
  if (candidates.empty()) {
    if (geo.total_nodes > 2 * geo.nodes_per_leaf)
      unfolded.note = fmt::format("not folded: no multiple of two leaves ({} nodes) divides the {} nodes",
                                  2 * geo.nodes_per_leaf, geo.total_nodes);
    return unfolded;
  }
  std::string why;
  for (int k : candidates) {
    Folding folding;
    folding.nodes = k;
    folding.total_nodes = geo.total_nodes;
    folding.ranks = k * geo.gpus_per_node;
    folding.groups.resize(program.groups.size());
    Verdict verdict;
    for (int group = 0; group < static_cast<int>(program.groups.size()) && !verdict; ++group)
      verdict = fold_group(program, group, k, geo, folding.groups[group]);
    if (!verdict) verdict = check_algorithms(program, folding, algorithm_of, geo);
    if (!verdict) return folding;
    why = fmt::format("onto {} nodes: {}", k, *verdict);
  }
  unfolded.note = "not folded " + why;
  return unfolded;
}

}  // namespace stratsim::sim::detail
