// The public entry points of collective.hpp: algorithm names, which algorithm implements and folds
// which collective, and the dispatch of schedules and closed forms to the algorithm files (ring,
// tree, rhd, direct, hierarchical, nvls). Argument checks happen here, once, so the algorithm files can
// assume a valid group, size and costs.

#include "common.hpp"

#include <cctype>
#include <optional>
#include <string>
#include <string_view>

#include "stratsim/core/enum_names.hpp"

namespace stratsim::sim {

using namespace collectives;

namespace {

std::string normalized(std::string_view text) {
  std::string out;
  for (char c : text) {
    const auto lower = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out.push_back(lower == '-' || lower == ' ' ? '_' : lower);
  }
  return out;
}

// The first name of an algorithm is the one reports print; the rest are accepted aliases.
constexpr core::EnumNames<Algorithm, 14> kAlgorithmNames{
    {{{Algorithm::automatic, "auto"},
      {Algorithm::ring, "ring"},
      {Algorithm::tree, "tree"},
      {Algorithm::recursive_halving_doubling, "rhd"},
      {Algorithm::direct, "direct"},
      {Algorithm::hierarchical, "hierarchical"},
      {Algorithm::nvls, "nvls"},
      {Algorithm::nvls_tree, "nvls_tree"},
      {Algorithm::chain, "chain"},
      {Algorithm::automatic, "automatic"},
      {Algorithm::tree, "double_binary_tree"},
      {Algorithm::nvls_tree, "nvlstree"},  // NCCL_ALGO's spelling
      {Algorithm::recursive_halving_doubling, "recursive_halving_doubling"},
      {Algorithm::recursive_halving_doubling, "halving_doubling"}}}};

}  // namespace

std::string_view algorithm_name(Algorithm algorithm) { return kAlgorithmNames.name(algorithm, "unknown"); }

// Names are matched case-insensitively, with '-' and ' ' read as '_'.
std::optional<Algorithm> parse_algorithm(std::string_view text) { return kAlgorithmNames.parse(normalized(text)); }

// `auto` implements everything (it resolves to ring at worst); tree is all-reduce and broadcast;
// chain, nvls and nvls_tree all-reduce only; a scatter is only ever direct (root to each member),
// as both NCCL and Gloo run it.
bool implements(Algorithm algorithm, CollectiveKind kind) {
  if (kind == CollectiveKind::scatter) return algorithm == Algorithm::direct || algorithm == Algorithm::automatic;
  if (algorithm == Algorithm::tree) return kind == CollectiveKind::all_reduce || kind == CollectiveKind::broadcast;
  if (algorithm == Algorithm::nvls || algorithm == Algorithm::nvls_tree || algorithm == Algorithm::chain)
    return kind == CollectiveKind::all_reduce;
  return true;
}

void check_fits(CollectiveKind kind, Algorithm algorithm, const std::vector<int>& member_nodes) {
  check_group_size(static_cast<long long>(member_nodes.size()));
  if (algorithm == Algorithm::automatic)
    fail("build_schedule needs a concrete algorithm; resolve 'auto' with select_algorithm first");
  if (!implements(algorithm, kind))
    fail(fmt::format("algorithm '{}' does not implement {}", algorithm_name(algorithm), kind_name(kind)));
  if (algorithm == Algorithm::hierarchical || algorithm == Algorithm::nvls_tree)
    require_hierarchical_layout(member_nodes, algorithm_name(algorithm));
  if (algorithm == Algorithm::nvls && member_nodes.size() > 1)
    for (int node : member_nodes)
      if (node != member_nodes.front())
        fail("algorithm 'nvls' reduces inside one NVSwitch: every member must be on the same node");
}

Schedule build_schedule(CollectiveKind kind, Algorithm algorithm, const std::vector<int>& member_nodes, double bytes) {
  check_bytes(bytes);
  // The shape requirement holds whatever the size, so a flat group fails the same way at 0 bytes.
  check_fits(kind, algorithm, member_nodes);

  const int p = static_cast<int>(member_nodes.size());
  Schedule schedule;
  if (algorithm == Algorithm::hierarchical || algorithm == Algorithm::nvls_tree) {
    const NodeLayout layout = node_layout(member_nodes);
    if (bytes > 0)
      schedule = algorithm == Algorithm::hierarchical ? hierarchical_schedule(kind, layout, bytes, layout.m())
                                                      : nvls_tree_schedule(layout, bytes, layout.m());
  } else if (p > 1 && bytes > 0) {
    switch (algorithm) {
      case Algorithm::ring:
        schedule = ring_schedule(kind, member_nodes, bytes, p);
        break;
      case Algorithm::tree:
        schedule = tree_schedule(kind, p, bytes);
        break;
      case Algorithm::recursive_halving_doubling:
        schedule = rhd_schedule(kind, p, bytes);
        break;
      case Algorithm::direct:
        schedule = direct_schedule(kind, p, bytes);
        break;
      case Algorithm::nvls:
        schedule = nvls_schedule(p, bytes);
        break;
      case Algorithm::chain:
        schedule = chain_schedule(p, bytes);
        break;
      case Algorithm::automatic:
      case Algorithm::hierarchical:
      case Algorithm::nvls_tree:
        break;
    }
  }
  schedule.kind = kind;
  schedule.algorithm = algorithm;
  return schedule;
}

bool folds(CollectiveKind kind, Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::ring:
    case Algorithm::hierarchical:
      return kind != CollectiveKind::all_to_all;
    case Algorithm::tree:
    case Algorithm::nvls_tree:
      return kind == CollectiveKind::all_reduce;
    default:
      return false;
  }
}

Schedule build_folded_schedule(CollectiveKind kind, Algorithm algorithm, const std::vector<int>& member_nodes,
                               int full_size, double bytes) {
  const int p = static_cast<int>(member_nodes.size());
  check_group_size(p);
  check_group_size(full_size);
  if (full_size == p) return build_schedule(kind, algorithm, member_nodes, bytes);
  if (full_size < p || full_size % p != 0)
    fail(fmt::format("a group of {} members cannot stand for {}: the full size must be a multiple", p, full_size));
  if (!folds(kind, algorithm))
    fail(fmt::format("algorithm '{}' does not fold {}", algorithm_name(algorithm), kind_name(kind)));
  check_bytes(bytes);
  Schedule schedule;
  if (algorithm == Algorithm::hierarchical || algorithm == Algorithm::nvls_tree) {
    const NodeLayout layout = require_hierarchical_layout(member_nodes, algorithm_name(algorithm));
    const int full_m = layout.m() * (full_size / p);
    if (bytes > 0)
      schedule = algorithm == Algorithm::hierarchical ? hierarchical_schedule(kind, layout, bytes, full_m)
                                                      : nvls_tree_schedule(layout, bytes, full_m);
  } else if (bytes > 0) {
    schedule = algorithm == Algorithm::ring ? ring_schedule(kind, member_nodes, bytes, full_size)
                                            : tree_all_reduce(p, bytes, full_size);
  }
  schedule.kind = kind;
  schedule.algorithm = algorithm;
  return schedule;
}

double closed_form_time(CollectiveKind kind, Algorithm algorithm, int p, double bytes, double alpha, double beta) {
  check_group_size(p);
  check_bytes(bytes);
  check_cost(alpha, "alpha");
  check_cost(beta, "beta");
  if (algorithm == Algorithm::automatic) fail("closed_form_time needs a concrete algorithm, not 'auto'");
  if (algorithm == Algorithm::hierarchical || algorithm == Algorithm::nvls_tree)
    fail(fmt::format("{} depends on the node shape; use {}_closed_form_time(..., g, m, ...)", algorithm_name(algorithm),
                     algorithm_name(algorithm)));
  if (!implements(algorithm, kind))
    fail(fmt::format("algorithm '{}' does not implement {}", algorithm_name(algorithm), kind_name(kind)));
  if (p == 1 || bytes == 0) return 0;  // nothing moves: the schedule is empty
  switch (algorithm) {
    case Algorithm::ring:
      return ring_closed_form(kind, p, bytes, alpha, beta);
    case Algorithm::tree:
      return tree_closed_form(kind, p, bytes, alpha, beta);
    case Algorithm::recursive_halving_doubling:
      return rhd_closed_form(kind, p, bytes, alpha, beta);
    case Algorithm::direct:
      return direct_closed_form(kind, p, bytes, alpha, beta);
    case Algorithm::nvls:
      return nvls_closed_form(p, bytes, alpha, beta);
    case Algorithm::chain:
      return chain_closed_form(p, bytes, alpha, beta);
    case Algorithm::automatic:
    case Algorithm::hierarchical:
    case Algorithm::nvls_tree:
      break;
  }
  return 0;
}

}  // namespace stratsim::sim
