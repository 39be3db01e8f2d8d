// Collective algorithms as phase schedules, their alpha-beta closed forms, and the selector.
//
// Every phase is built so that on an idle uniform star (one full-duplex link of bandwidth
// B = 1/beta per member into a non-blocking switch) the SimGrid engine's max-min sharing finishes
// it in exactly latency_steps * alpha + max(member egress, member ingress) * beta. That holds
// because each phase is one of three balanced shapes:
//   * every member sends at most one flow and receives at most one flow (rings, chains, pairwise
//     exchanges, Bruck steps, fold/unfold): each flow has its links to itself;
//   * every member of a group sends one equal flow to every other member (direct, hierarchical
//     all-to-all): all links carry the same load, so fair shares are equal and finish together;
//   * all flows of a phase have the same size and the busiest links carry the most of them
//     (double binary tree, direct broadcast): every flow gets at least the share of the busiest
//     link, so the phase ends exactly when the busiest link drains.
// estimate_time() is the same formula evaluated on a schedule, so the tests compare it with the
// closed forms below and the engine's idle-platform runs with both.

#include "stratsim/sim/collective.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace stratsim::sim {
namespace {

using core::CollectiveKind;

// Direct schedules hold p(p-1) flows per phase; beyond this the selector does not consider them
// (building and simulating them would dominate the run, and NCCL has no such algorithm either).
constexpr int kDirectMaxMembers = 64;
// Bit tricks below shift 1 << k for k < 31; groups this large are far beyond any real job.
constexpr int kMaxMembers = 1 << 29;
// Two candidate times closer than this (relative) are a tie, resolved by the documented order,
// so that the choice does not hinge on the last bit of two summation orders.
constexpr double kTieTolerance = 1e-12;

[[noreturn]] void fail(const std::string& message) { throw std::invalid_argument(message); }

std::string_view kind_name(CollectiveKind kind) { return core::collective_kind_name(kind); }

int floor_log2(int p) { return std::bit_width(static_cast<unsigned>(p)) - 1; }
int ceil_log2(int p) { return p <= 1 ? 0 : std::bit_width(static_cast<unsigned>(p - 1)); }

void check_group_size(long long p) {
  if (p < 1) fail("a collective needs at least one member");
  if (p > kMaxMembers) fail(fmt::format("a collective group of {} members is too large (at most {})", p, kMaxMembers));
}

void check_bytes(double bytes) {
  if (!std::isfinite(bytes) || bytes < 0) fail(fmt::format("collective bytes must be finite and >= 0, got {}", bytes));
}

void check_cost(double value, std::string_view name) {
  if (!std::isfinite(value) || value < 0)
    fail(fmt::format("link cost {} must be finite and >= 0, got {}", name, value));
}

void check_costs(const LinkCosts& costs) {
  check_cost(costs.alpha_intra, "alpha_intra");
  check_cost(costs.beta_intra, "beta_intra");
  check_cost(costs.alpha_inter, "alpha_inter");
  check_cost(costs.beta_inter, "beta_inter");
}

// ---------------------------------------------------------------------------------------------
// Phase building blocks. Members are indices into the group; a "ring" or "chain" is a list of them.

SchedulePhase make_phase(std::string label, int latency_steps) {
  SchedulePhase phase;
  phase.label = std::move(label);
  phase.latency_steps = latency_steps;
  return phase;
}

void add_flow(SchedulePhase& phase, int src, int dst, double bytes) {
  // A zero-byte flow would still cost a route latency in SimGrid, which no algorithm pays for.
  if (bytes > 0) phase.flows.push_back({src, dst, bytes});
}

// Phases that ended up without flows (a fold with no extra members) are dropped rather than kept
// as empty phases, so every phase of a schedule moves data.
void append(Schedule& schedule, SchedulePhase phase) {
  if (!phase.flows.empty()) schedule.phases.push_back(std::move(phase));
}

void add_ring(SchedulePhase& phase, const std::vector<int>& ring, double bytes) {
  const int size = static_cast<int>(ring.size());
  if (size < 2) return;
  for (int i = 0; i < size; ++i) add_flow(phase, ring[i], ring[(i + 1) % size], bytes);
}

void add_chain(SchedulePhase& phase, const std::vector<int>& chain, double bytes) {
  for (std::size_t i = 0; i + 1 < chain.size(); ++i) add_flow(phase, chain[i], chain[i + 1], bytes);
}

void add_all_pairs(SchedulePhase& phase, const std::vector<int>& group, double bytes) {
  for (int src : group)
    for (int dst : group)
      if (src != dst) add_flow(phase, src, dst, bytes);
}

std::vector<int> identity_members(int p) {
  std::vector<int> members(p);
  std::iota(members.begin(), members.end(), 0);
  return members;
}

// ---------------------------------------------------------------------------------------------
// Ring (NCCL's default): one phase per collective; the (p-1) or 2(p-1) pipelined ring steps are
// latency terms of that phase, the bytes are what each member forwards over the whole ring.

// Bytes each member sends around a ring of `size` members for the reduce-scatter or all-gather
// of `bytes` (size-1 chunks of bytes/size).
double ring_pass_bytes(int size, double bytes) { return (size - 1) * (bytes / size); }

// `full` is the size of the group the schedule stands for (see build_folded_schedule): the ring
// closes over the p simulated members but moves the full ring's chunks for its latency steps.
Schedule ring_schedule(CollectiveKind kind, int p, double bytes, int full) {
  Schedule schedule;
  const std::vector<int> members = identity_members(p);
  switch (kind) {
    case CollectiveKind::all_reduce: {
      SchedulePhase phase = make_phase("ring all-reduce", 2 * (full - 1));
      add_ring(phase, members, 2 * ring_pass_bytes(full, bytes));
      append(schedule, std::move(phase));
      break;
    }
    case CollectiveKind::all_gather:
    case CollectiveKind::reduce_scatter: {
      SchedulePhase phase =
          make_phase(kind == CollectiveKind::all_gather ? "ring all-gather" : "ring reduce-scatter", full - 1);
      add_ring(phase, members, ring_pass_bytes(full, bytes));
      append(schedule, std::move(phase));
      break;
    }
    case CollectiveKind::broadcast: {
      // Pipelined chain from member 0: each hop forwards the whole buffer, the hops overlap, so
      // the buffer crosses one link's worth of bandwidth and p-1 latencies. Folded, the hop out
      // of the last simulated member stands for the hop into the next block: the chain closes.
      SchedulePhase phase = make_phase("chain broadcast", full - 1);
      if (full > p) add_ring(phase, members, bytes);
      else add_chain(phase, members, bytes);
      append(schedule, std::move(phase));
      break;
    }
    case CollectiveKind::all_to_all:
      // Pairwise exchange: at step k every member sends its chunk for member i+k. One peer per
      // step keeps each phase a permutation, which no link has to share.
      for (int k = 1; k < p; ++k) {
        SchedulePhase phase = make_phase(fmt::format("pairwise step {}", k), 1);
        phase.flows.reserve(p);
        for (int i = 0; i < p; ++i) add_flow(phase, i, (i + k) % p, bytes / p);
        append(schedule, std::move(phase));
      }
      break;
  }
  return schedule;
}

// ---------------------------------------------------------------------------------------------
// Double binary tree (NCCL trees.cc, ncclGetBtree / ncclGetDtree), all-reduce only; broadcast
// uses a binomial tree from member 0.

// Parent of `rank` in NCCL's binary tree over [0, p) rooted at 0: the tree alternates leaves (odd
// ranks) and internal nodes (even ranks). A rank with lowest set bit b hangs under the rank one
// level up (bit 2b set, bit b cleared); when that is out of range it hangs under rank ^ b.
long long btree_parent(long long rank, long long p) {
  if (rank == 0) return -1;
  const long long bit = rank & -rank;
  const long long up = (rank ^ bit) | (bit << 1);
  return up < p ? up : rank ^ bit;
}

// Parent in tree 0 (the btree) or tree 1: the mirror image for even p, the btree shifted by one
// rank for odd p. Mirroring maps the even (internal) ranks of tree 0 onto odd ranks, so every
// member is internal in at most one tree and the two trees together load each link about evenly.
// For odd p the shift leaves member 0 internal in both trees, with one child in each.
int dtree_parent(int tree, int rank, int p) {
  if (tree == 0) return static_cast<int>(btree_parent(rank, p));
  if (p % 2 == 1) {
    const long long up = btree_parent((rank - 1 + p) % p, p);
    return up < 0 ? -1 : static_cast<int>((up + 1) % p);
  }
  const long long up = btree_parent(p - 1 - rank, p);
  return up < 0 ? -1 : static_cast<int>(p - 1 - up);
}

// Depth in edges of one tree, by memoised walks to the root (O(p)).
int dtree_depth(int tree, int p) {
  std::vector<int> depth(p, -1);
  std::vector<int> path;
  int deepest = 0;
  for (int start = 0; start < p; ++start) {
    int rank = start;
    while (rank >= 0 && depth[rank] < 0) {
      path.push_back(rank);
      rank = dtree_parent(tree, rank, p);
    }
    int level = rank < 0 ? -1 : depth[rank];
    for (auto it = path.rbegin(); it != path.rend(); ++it) depth[*it] = ++level;
    path.clear();
    deepest = std::max(deepest, depth[start]);
  }
  return deepest;
}

// All-reduce: each tree carries half the buffer. One phase reduces up both trees, one broadcasts
// down them; each phase stands for the deeper tree's depth in latency steps.
// Folded (full > p), the trees span the simulated members with the full trees' depth: every
// member still sends and receives what it would (one parent and at most two children per tree).
Schedule tree_all_reduce(int p, double bytes, int full) {
  const int depth = std::max(dtree_depth(0, full), dtree_depth(1, full));
  SchedulePhase reduce = make_phase("double binary tree reduce", depth);
  SchedulePhase broadcast = make_phase("double binary tree broadcast", depth);
  reduce.flows.reserve(2 * p);
  broadcast.flows.reserve(2 * p);
  for (int tree = 0; tree < 2; ++tree) {
    for (int rank = 0; rank < p; ++rank) {
      const int parent = dtree_parent(tree, rank, p);
      if (parent < 0) continue;
      add_flow(reduce, rank, parent, bytes / 2);
      add_flow(broadcast, parent, rank, bytes / 2);
    }
  }
  Schedule schedule;
  append(schedule, std::move(reduce));
  append(schedule, std::move(broadcast));
  return schedule;
}

// Binomial broadcast from member 0: at step k the 2^k members that have the buffer send it to
// member + 2^k, doubling the holders each step.
Schedule binomial_broadcast(int p, double bytes) {
  Schedule schedule;
  for (int k = 0; k < ceil_log2(p); ++k) {
    const int span = 1 << k;
    SchedulePhase phase = make_phase(fmt::format("binomial step {}", k), 1);
    for (int i = 0; i < span && i + span < p; ++i) add_flow(phase, i, i + span, bytes);
    append(schedule, std::move(phase));
  }
  return schedule;
}

Schedule tree_schedule(CollectiveKind kind, int p, double bytes) {
  return kind == CollectiveKind::all_reduce ? tree_all_reduce(p, bytes, p) : binomial_broadcast(p, bytes);
}

// ---------------------------------------------------------------------------------------------
// Recursive halving / doubling. The exchanges run on a power-of-two core of q = 2^floor(log2 p)
// members; the r = p - q extra members q..p-1 fold into core members 0..r-1 first and are served
// by them last (the MPICH scheme). Halving pairs members at distance 1, 2, 4, ... so the largest
// exchanges stay between neighbours (usually on one node); doubling retraces that in reverse.

struct Core {
  int levels = 0;  // log2 q
  int q = 1;       // core members 0..q-1
  int r = 0;       // extra members q..q+r-1; extra q+j pairs with core member j
};

Core core_of(int p) {
  Core core;
  core.levels = floor_log2(p);
  core.q = 1 << core.levels;
  core.r = p - core.q;
  return core;
}

// Extras hand their data to their core partner (or the partner hands results back).
SchedulePhase fold_phase(std::string label, const Core& core, double bytes, bool to_core) {
  SchedulePhase phase = make_phase(std::move(label), 1);
  for (int j = 0; j < core.r; ++j) {
    if (to_core)
      add_flow(phase, core.q + j, j, bytes);
    else
      add_flow(phase, j, core.q + j, bytes);
  }
  return phase;
}

// A pairwise-exchange step of the core at distance 2^k where every member sends `bytes`.
SchedulePhase exchange_phase(std::string label, const Core& core, int k, double bytes) {
  SchedulePhase phase = make_phase(std::move(label), 1);
  phase.flows.reserve(core.q);
  for (int c = 0; c < core.q; ++c) add_flow(phase, c, c ^ (1 << k), bytes);
  return phase;
}

// The nccl-tests output of reduce-scatter is one n/p block per member, extras included, so with
// extras the core works on p blocks, not q equal pieces: core member c owns its own block and,
// for c < r, its extra's. After halving steps 0..k, a core member holds the blocks of the core
// members congruent to it modulo M = 2^(k+1); this is how many blocks that class of x holds. The
// largest class holds q/M + ceil(r/M) = ceil(p/M) blocks, which is what the closed form charges.
int class_blocks(int x, int modulus, const Core& core) {
  return core.q / modulus + core.r / modulus + ((x % modulus) < (core.r % modulus) ? 1 : 0);
}

// Step k of the weighted exchange: each member sends the blocks of class `sent_class(c)`.
template <typename SentClass>
SchedulePhase weighted_exchange_phase(std::string label, const Core& core, int k, double block, SentClass sent_class) {
  SchedulePhase phase = make_phase(std::move(label), 1);
  phase.flows.reserve(core.q);
  const int modulus = 2 << k;
  for (int c = 0; c < core.q; ++c) add_flow(phase, c, c ^ (1 << k), class_blocks(sent_class(c), modulus, core) * block);
  return phase;
}

// Rabenseifner: recursive-halving reduce-scatter then recursive-doubling all-gather over q equal
// pieces (the final layout is free, so the pieces need not align with p blocks).
void rhd_all_reduce(Schedule& schedule, const Core& core, double bytes) {
  append(schedule, fold_phase("fold", core, bytes, true));
  for (int k = 0; k < core.levels; ++k)
    append(schedule, exchange_phase(fmt::format("reduce-scatter step {}", k), core, k, bytes / (2 << k)));
  for (int k = core.levels - 1; k >= 0; --k)
    append(schedule, exchange_phase(fmt::format("all-gather step {}", k), core, k, bytes / (2 << k)));
  append(schedule, fold_phase("unfold", core, bytes, false));
}

// Recursive halving: the extra sends its whole input (its own block still needs everyone's
// contribution), the core halves over p blocks, then each extra gets its reduced block.
void rhd_reduce_scatter(Schedule& schedule, const Core& core, int p, double bytes) {
  const double block = bytes / p;
  append(schedule, fold_phase("fold", core, bytes, true));
  for (int k = 0; k < core.levels; ++k) {
    auto partner_class = [k](int c) { return c ^ (1 << k); };
    append(schedule, weighted_exchange_phase(fmt::format("reduce-scatter step {}", k), core, k, block, partner_class));
  }
  append(schedule, fold_phase("unfold", core, block, false));
}

// Recursive doubling: the reverse of recursive halving. The extra brings its block, the core
// doubles over p blocks, then each extra gets every block but its own.
void rhd_all_gather(Schedule& schedule, const Core& core, int p, double bytes) {
  const double block = bytes / p;
  append(schedule, fold_phase("fold", core, block, true));
  for (int k = core.levels - 1; k >= 0; --k) {
    auto own_class = [](int c) { return c; };
    append(schedule, weighted_exchange_phase(fmt::format("all-gather step {}", k), core, k, block, own_class));
  }
  append(schedule, fold_phase("unfold", core, (p - 1) * block, false));
}

// van de Geijn broadcast: binomial scatter of q pieces from member 0 (distance 1 first, so
// member c ends with piece c), recursive-doubling all-gather, then each extra gets the buffer.
void rhd_broadcast(Schedule& schedule, const Core& core, double bytes) {
  for (int k = 0; k < core.levels; ++k) {
    const int span = 1 << k;
    SchedulePhase phase = make_phase(fmt::format("scatter step {}", k), 1);
    for (int c = 0; c < span; ++c) add_flow(phase, c, c + span, bytes / (2 << k));
    append(schedule, std::move(phase));
  }
  for (int k = core.levels - 1; k >= 0; --k)
    append(schedule, exchange_phase(fmt::format("all-gather step {}", k), core, k, bytes / (2 << k)));
  append(schedule, fold_phase("unfold", core, bytes, false));
}

// Members j in [0, p) with bit k set: the Bruck blocks that move at step k.
long long bruck_blocks(int k, long long p) {
  const long long period = 2LL << k, half = 1LL << k;
  return (p / period) * half + std::max(0LL, p % period - half);
}

// Bruck all-to-all: the block for member i+j travels along the set bits of j; at step k every
// member forwards the blocks whose offset has bit k set to member i + 2^k. Works for any p with
// ceil(log2 p) steps, each a permutation with equal flows, so it needs no fold.
void bruck_all_to_all(Schedule& schedule, int p, double bytes) {
  for (int k = 0; k < ceil_log2(p); ++k) {
    SchedulePhase phase = make_phase(fmt::format("bruck step {}", k), 1);
    phase.flows.reserve(p);
    const double step_bytes = bruck_blocks(k, p) * (bytes / p);
    for (int i = 0; i < p; ++i) add_flow(phase, i, static_cast<int>((i + (1LL << k)) % p), step_bytes);
    append(schedule, std::move(phase));
  }
}

Schedule rhd_schedule(CollectiveKind kind, int p, double bytes) {
  Schedule schedule;
  const Core core = core_of(p);
  switch (kind) {
    case CollectiveKind::all_reduce:
      rhd_all_reduce(schedule, core, bytes);
      break;
    case CollectiveKind::reduce_scatter:
      rhd_reduce_scatter(schedule, core, p, bytes);
      break;
    case CollectiveKind::all_gather:
      rhd_all_gather(schedule, core, p, bytes);
      break;
    case CollectiveKind::broadcast:
      rhd_broadcast(schedule, core, bytes);
      break;
    case CollectiveKind::all_to_all:
      bruck_all_to_all(schedule, p, bytes);
      break;
  }
  return schedule;
}

// ---------------------------------------------------------------------------------------------
// Direct: every member talks to every other member in one step; O(p^2) flows per phase.

Schedule direct_schedule(CollectiveKind kind, int p, double bytes) {
  Schedule schedule;
  const std::vector<int> members = identity_members(p);
  auto all_pairs = [&](std::string label) {
    SchedulePhase phase = make_phase(std::move(label), 1);
    phase.flows.reserve(static_cast<std::size_t>(p) * (p - 1));
    add_all_pairs(phase, members, bytes / p);
    append(schedule, std::move(phase));
  };
  switch (kind) {
    case CollectiveKind::all_reduce:
      all_pairs("direct reduce-scatter");
      all_pairs("direct all-gather");
      break;
    case CollectiveKind::all_gather:
      all_pairs("direct all-gather");
      break;
    case CollectiveKind::reduce_scatter:
      all_pairs("direct reduce-scatter");
      break;
    case CollectiveKind::all_to_all:
      all_pairs("direct all-to-all");
      break;
    case CollectiveKind::broadcast: {
      // The root's link carries p-1 copies of the buffer: cheap in latency, bound by its egress.
      SchedulePhase phase = make_phase("direct broadcast", 1);
      for (int dst = 1; dst < p; ++dst) add_flow(phase, 0, dst, bytes);
      append(schedule, std::move(phase));
      break;
    }
  }
  return schedule;
}

// ---------------------------------------------------------------------------------------------
// Hierarchical: rings inside each node, and across nodes one ring per "rail" (the members with
// the same local index), so the g shards cross the inter-node fabric over g NICs in parallel.

struct NodeLayout {
  std::vector<std::vector<int>> nodes;  // nodes[j][l]: member at local index l of node j
  bool even = true;                     // every node holds the same number of members
  int g() const { return static_cast<int>(nodes.front().size()); }
  int m() const { return static_cast<int>(nodes.size()); }
  bool hierarchical() const { return even && g() >= 2 && m() >= 2; }

  std::vector<std::vector<int>> rails() const {
    std::vector<std::vector<int>> rails(g());
    for (const auto& node : nodes)
      for (int l = 0; l < g(); ++l) rails[l].push_back(node[l]);
    return rails;
  }
};

// Nodes in order of first appearance; a member's local index is its order within its node.
NodeLayout node_layout(const std::vector<int>& member_nodes) {
  NodeLayout layout;
  std::unordered_map<int, int> index;
  for (int i = 0; i < static_cast<int>(member_nodes.size()); ++i) {
    auto [it, inserted] = index.emplace(member_nodes[i], static_cast<int>(layout.nodes.size()));
    if (inserted) layout.nodes.emplace_back();
    layout.nodes[it->second].push_back(i);
  }
  for (const auto& node : layout.nodes) layout.even = layout.even && node.size() == layout.nodes.front().size();
  return layout;
}

NodeLayout require_hierarchical_layout(const std::vector<int>& member_nodes) {
  NodeLayout layout = node_layout(member_nodes);
  if (!layout.even) {
    fail(
        fmt::format("hierarchical needs the same number of members on every node; the first node has {}, but node "
                    "sizes differ across the {} nodes",
                    layout.g(), layout.m()));
  }
  if (!layout.hierarchical()) {
    fail(fmt::format("hierarchical needs at least 2 nodes with at least 2 members each (got {} node(s) of {})",
                     layout.m(), layout.g()));
  }
  return layout;
}

SchedulePhase rings_phase(std::string label, int steps, const std::vector<std::vector<int>>& rings, double bytes) {
  SchedulePhase phase = make_phase(std::move(label), steps);
  for (const auto& ring : rings) add_ring(phase, ring, bytes);
  return phase;
}

SchedulePhase groups_all_pairs_phase(std::string label, const std::vector<std::vector<int>>& groups, double bytes) {
  SchedulePhase phase = make_phase(std::move(label), 1);
  for (const auto& group : groups) add_all_pairs(phase, group, bytes);
  return phase;
}

// `full_m` is the node count of the group the schedule stands for: folded, the rails close over
// the simulated nodes but carry the full rails' chunks for their latency steps.
Schedule hierarchical_schedule(CollectiveKind kind, const NodeLayout& layout, double bytes, int full_m) {
  Schedule schedule;
  const int g = layout.g(), m = full_m;
  const auto rails = layout.rails();
  const double shard = bytes / g;  // what each rail carries across nodes
  switch (kind) {
    case CollectiveKind::all_reduce:
      append(schedule, rings_phase("intra reduce-scatter", g - 1, layout.nodes, ring_pass_bytes(g, bytes)));
      append(schedule, rings_phase("inter all-reduce", 2 * (m - 1), rails, 2 * ring_pass_bytes(m, shard)));
      append(schedule, rings_phase("intra all-gather", g - 1, layout.nodes, ring_pass_bytes(g, bytes)));
      break;
    case CollectiveKind::all_gather:
      // Gather each rail's shard across nodes first, so the fast intra-node step moves the bulk.
      append(schedule, rings_phase("inter all-gather", m - 1, rails, ring_pass_bytes(m, shard)));
      append(schedule, rings_phase("intra all-gather", g - 1, layout.nodes, ring_pass_bytes(g, bytes)));
      break;
    case CollectiveKind::reduce_scatter:
      append(schedule, rings_phase("intra reduce-scatter", g - 1, layout.nodes, ring_pass_bytes(g, bytes)));
      append(schedule, rings_phase("inter reduce-scatter", m - 1, rails, ring_pass_bytes(m, shard)));
      break;
    case CollectiveKind::broadcast: {
      // Root is member 0, local index 0: chain across nodes on its rail, then a chain per node.
      SchedulePhase inter = make_phase("inter broadcast", m - 1);
      if (m > layout.m()) add_ring(inter, rails.front(), bytes);
      else add_chain(inter, rails.front(), bytes);
      append(schedule, std::move(inter));
      SchedulePhase intra = make_phase("intra broadcast", g - 1);
      for (const auto& node : layout.nodes) add_chain(intra, node, bytes);
      append(schedule, std::move(intra));
      break;
    }
    case CollectiveKind::all_to_all:
      // Rail-aligned (PXN-like): first hand each block to the local member on the destination's
      // rail (n/g per peer: the m blocks for that local index), then each rail exchanges across
      // nodes (n/m per peer: the g blocks its node holds for that node's member).
      append(schedule, groups_all_pairs_phase("intra all-to-all", layout.nodes, bytes / g));
      append(schedule, groups_all_pairs_phase("inter all-to-all", rails, bytes / m));
      break;
  }
  return schedule;
}

// ---------------------------------------------------------------------------------------------
// Closed forms on a uniform platform (alpha, beta). Each is written as latency terms plus
// bandwidth terms and matches the schedule above phase by phase.

double ring_closed_form(CollectiveKind kind, int p, double n, double a, double b) {
  switch (kind) {
    case CollectiveKind::all_reduce:  // 2(p-1)a + 2(p-1)/p n b
      return 2 * (p - 1) * a + 2 * ring_pass_bytes(p, n) * b;
    case CollectiveKind::all_gather:
    case CollectiveKind::reduce_scatter:  // (p-1)a + (p-1)/p n b
      return (p - 1) * a + ring_pass_bytes(p, n) * b;
    case CollectiveKind::broadcast:  // pipelined chain: (p-1)a + n b
      return (p - 1) * a + n * b;
    case CollectiveKind::all_to_all:  // pairwise: (p-1)(a + n/p b)
      return (p - 1) * (a + (n / p) * b);
  }
  return 0;
}

// All-reduce over NCCL's double binary tree: both trees have depth ceil(log2 p) (rank 1 climbs
// 1, 2, 4, ..., 2^(K-1), 0 in tree 0; tree 1 is a mirror or shift of it), and with p >= 3 some
// member sends n/2 up each tree (and, in the down phase, receives n/2 from each parent), so each
// phase costs K a + n b: 2 K a + 2 n b. With p = 2 each member has one flow per phase of n/2:
// 2a + n b, the same as ring.
// Broadcast over the binomial tree: K = ceil(log2 p) steps of a + n b.
double tree_closed_form(CollectiveKind kind, int p, double n, double a, double b) {
  const int depth = ceil_log2(p);
  if (kind == CollectiveKind::broadcast) return depth * (a + n * b);
  const int flows_per_member = p == 2 ? 1 : 2;
  return 2 * depth * a + 2 * flows_per_member * (n / 2) * b;
}

// sum_{k=1..L} ceil(p / 2^k): blocks the largest class sends over the halving (or doubling) steps
// of the p-block reduce-scatter (all-gather) core; equals q - 1 when p = q.
double halving_blocks(const Core& core) {
  double blocks = 0;
  for (int k = 0; k < core.levels; ++k) blocks += core.q / (2 << k) + (core.r + (2 << k) - 1) / (2 << k);
  return blocks;
}

// With L = floor(log2 p), q = 2^L, r = p - q, [r] = 1 if r > 0 else 0, B = halving_blocks:
//   all_reduce     2L a + 2(q-1)/q n b                + [r] (2a + 2n b)          fold n, unfold n
//   reduce_scatter  L a + B n/p b                     + [r] (2a + (n + n/p) b)   fold n, unfold n/p
//   all_gather      L a + B n/p b                     + [r] (2a + n b)           fold n/p, unfold (p-1)/p n
//   broadcast      2L a + 2(q-1)/q n b                + [r] (a + n b)            unfold n
//   all_to_all (Bruck, any p)  K a + (sum_{j<p} popcount j) n/p b, K = ceil(log2 p)
//                              (= log2p a + (n/2) log2p b for p a power of two)
double rhd_closed_form(CollectiveKind kind, int p, double n, double a, double b) {
  const Core core = core_of(p);
  const bool folded = core.r > 0;
  const double block = n / p;
  const double core_pieces = ring_pass_bytes(core.q, n);  // n/2 + n/4 + ... + n/q = (q-1)/q n
  switch (kind) {
    case CollectiveKind::all_reduce:
      return 2 * core.levels * a + 2 * core_pieces * b + (folded ? 2 * a + 2 * n * b : 0.0);
    case CollectiveKind::reduce_scatter:
      return core.levels * a + halving_blocks(core) * block * b + (folded ? 2 * a + (n + block) * b : 0.0);
    case CollectiveKind::all_gather:
      return core.levels * a + halving_blocks(core) * block * b + (folded ? 2 * a + n * b : 0.0);
    case CollectiveKind::broadcast:
      return 2 * core.levels * a + 2 * core_pieces * b + (folded ? a + n * b : 0.0);
    case CollectiveKind::all_to_all: {
      double blocks = 0;
      for (int k = 0; k < ceil_log2(p); ++k) blocks += static_cast<double>(bruck_blocks(k, p));
      return ceil_log2(p) * a + blocks * block * b;
    }
  }
  return 0;
}

double direct_closed_form(CollectiveKind kind, int p, double n, double a, double b) {
  switch (kind) {
    case CollectiveKind::all_reduce:  // direct reduce-scatter + direct all-gather
      return 2 * (a + ring_pass_bytes(p, n) * b);
    case CollectiveKind::all_gather:
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::all_to_all:
      return a + ring_pass_bytes(p, n) * b;
    case CollectiveKind::broadcast:  // bound by the root's egress
      return a + (p - 1) * n * b;
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Selector helpers.

// counts[k]: members i whose member (i+k) mod p sits on the same node. O(sum of node sizes^2).
std::vector<int> same_node_offsets(const std::vector<int>& member_nodes) {
  const int p = static_cast<int>(member_nodes.size());
  const NodeLayout layout = node_layout(member_nodes);
  std::vector<int> counts(p, 0);
  if (layout.m() == 1) return std::vector<int>(p, p);
  for (const auto& node : layout.nodes)
    for (int src : node)
      for (int dst : node)
        if (src != dst) ++counts[(dst - src + p) % p];
  return counts;
}

// estimate_time of the pairwise all-to-all without building its p(p-1) flows: step k is a
// permutation of equal flows, so it costs the largest alpha plus n/p times the largest beta
// among its flows, and whether those are intra, inter or both depends only on the offset k.
double ring_all_to_all_estimate(const std::vector<int>& member_nodes, double bytes, const LinkCosts& costs) {
  const int p = static_cast<int>(member_nodes.size());
  const std::vector<int> same_node = same_node_offsets(member_nodes);
  const double block = bytes / p;
  double total = 0;
  for (int k = 1; k < p; ++k) {
    const bool intra = same_node[k] > 0, inter = same_node[k] < p;
    const double alpha = std::max(intra ? costs.alpha_intra : 0.0, inter ? costs.alpha_inter : 0.0);
    const double beta = std::max(intra ? costs.beta_intra : 0.0, inter ? costs.beta_inter : 0.0);
    total += alpha + block * beta;
  }
  return total;
}

double candidate_time(CollectiveKind kind, Algorithm algorithm, const std::vector<int>& member_nodes,
                      const NodeLayout& layout, double bytes, const LinkCosts& costs) {
  // Hierarchical phases are all-intra or all-inter, so its estimate is its closed form.
  if (algorithm == Algorithm::hierarchical)
    return hierarchical_closed_form_time(kind, layout.g(), layout.m(), bytes, costs);
  if (algorithm == Algorithm::ring && kind == CollectiveKind::all_to_all)
    return ring_all_to_all_estimate(member_nodes, bytes, costs);
  return estimate_time(build_schedule(kind, algorithm, member_nodes, bytes), member_nodes, costs);
}

std::string normalized(std::string_view text) {
  std::string out;
  for (char c : text) {
    const auto lower = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out.push_back(lower == '-' || lower == ' ' ? '_' : lower);
  }
  return out;
}

}  // namespace

std::string_view algorithm_name(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::automatic:
      return "auto";
    case Algorithm::ring:
      return "ring";
    case Algorithm::tree:
      return "tree";
    case Algorithm::recursive_halving_doubling:
      return "rhd";
    case Algorithm::direct:
      return "direct";
    case Algorithm::hierarchical:
      return "hierarchical";
  }
  return "unknown";
}

std::optional<Algorithm> parse_algorithm(std::string_view text) {
  const std::string name = normalized(text);
  if (name == "auto" || name == "automatic") return Algorithm::automatic;
  if (name == "ring") return Algorithm::ring;
  if (name == "tree" || name == "double_binary_tree") return Algorithm::tree;
  if (name == "rhd" || name == "recursive_halving_doubling" || name == "halving_doubling")
    return Algorithm::recursive_halving_doubling;
  if (name == "direct") return Algorithm::direct;
  if (name == "hierarchical") return Algorithm::hierarchical;
  return std::nullopt;
}

// `auto` implements everything (it resolves to ring at worst); tree is all-reduce and broadcast.
bool implements(Algorithm algorithm, CollectiveKind kind) {
  if (algorithm == Algorithm::tree) return kind == CollectiveKind::all_reduce || kind == CollectiveKind::broadcast;
  return true;
}

Schedule build_schedule(CollectiveKind kind, Algorithm algorithm, const std::vector<int>& member_nodes, double bytes) {
  check_group_size(static_cast<long long>(member_nodes.size()));
  check_bytes(bytes);
  if (algorithm == Algorithm::automatic)
    fail("build_schedule needs a concrete algorithm; resolve 'auto' with select_algorithm first");
  if (!implements(algorithm, kind))
    fail(fmt::format("algorithm '{}' does not implement {}", algorithm_name(algorithm), kind_name(kind)));

  const int p = static_cast<int>(member_nodes.size());
  Schedule schedule;
  // The shape requirement holds whatever the size, so a flat group fails the same way at 0 bytes.
  if (algorithm == Algorithm::hierarchical) {
    const NodeLayout layout = require_hierarchical_layout(member_nodes);
    if (bytes > 0) schedule = hierarchical_schedule(kind, layout, bytes, layout.m());
  } else if (p > 1 && bytes > 0) {
    switch (algorithm) {
      case Algorithm::ring:
        schedule = ring_schedule(kind, p, bytes, p);
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
      case Algorithm::automatic:
      case Algorithm::hierarchical:
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
  if (algorithm == Algorithm::hierarchical) {
    const NodeLayout layout = require_hierarchical_layout(member_nodes);
    if (bytes > 0) schedule = hierarchical_schedule(kind, layout, bytes, layout.m() * (full_size / p));
  } else if (bytes > 0) {
    schedule =
        algorithm == Algorithm::ring ? ring_schedule(kind, p, bytes, full_size) : tree_all_reduce(p, bytes, full_size);
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
  if (algorithm == Algorithm::hierarchical)
    fail("hierarchical depends on the node shape; use hierarchical_closed_form_time(kind, g, m, ...)");
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
    case Algorithm::automatic:
    case Algorithm::hierarchical:
      break;
  }
  return 0;
}

// With shard = n/g:
//   all_reduce      2[(g-1)a_i + (g-1)/g n b_i] + 2(m-1)a_e + 2(m-1)/m shard b_e
//   all_gather,     (g-1)a_i + (g-1)/g n b_i + (m-1)a_e + (m-1)/m shard b_e
//   reduce_scatter  (same terms, the other order)
//   broadcast       (m-1)a_e + n b_e + (g-1)a_i + n b_i          (two pipelined chains)
//   all_to_all      a_i + (g-1)/g n b_i + a_e + (m-1)/m n b_e     (rail-aligned, two steps)
double hierarchical_closed_form_time(CollectiveKind kind, int g, int m, double bytes, const LinkCosts& costs) {
  if (g < 2 || m < 2)
    fail(fmt::format("hierarchical needs at least 2 nodes with at least 2 members each (got {} of {})", m, g));
  check_group_size(static_cast<long long>(g) * m);
  check_bytes(bytes);
  check_costs(costs);
  if (bytes == 0) return 0;
  const double n = bytes, shard = bytes / g;
  const double intra_pass = (g - 1) * costs.alpha_intra + ring_pass_bytes(g, n) * costs.beta_intra;
  const double inter_pass = (m - 1) * costs.alpha_inter + ring_pass_bytes(m, shard) * costs.beta_inter;
  switch (kind) {
    case CollectiveKind::all_reduce:
      return 2 * intra_pass + 2 * (m - 1) * costs.alpha_inter + 2 * ring_pass_bytes(m, shard) * costs.beta_inter;
    case CollectiveKind::all_gather:
    case CollectiveKind::reduce_scatter:
      return intra_pass + inter_pass;
    case CollectiveKind::broadcast:
      return (m - 1) * costs.alpha_inter + n * costs.beta_inter + (g - 1) * costs.alpha_intra + n * costs.beta_intra;
    case CollectiveKind::all_to_all:
      return costs.alpha_intra + (g - 1) * (n / g) * costs.beta_intra + costs.alpha_inter +
             (m - 1) * (n / m) * costs.beta_inter;
  }
  return 0;
}

double estimate_time(const Schedule& schedule, const std::vector<int>& member_nodes, const LinkCosts& costs) {
  check_costs(costs);
  const int p = static_cast<int>(member_nodes.size());
  std::vector<double> egress(p, 0.0), ingress(p, 0.0);
  std::vector<int> touched;
  double total = 0;
  for (const SchedulePhase& phase : schedule.phases) {
    double alpha = 0;
    for (const Flow& flow : phase.flows) {
      if (flow.src < 0 || flow.src >= p || flow.dst < 0 || flow.dst >= p)
        fail(fmt::format("phase '{}' has a flow {} -> {} outside the group of {}", phase.label, flow.src, flow.dst, p));
      const bool intra = member_nodes[flow.src] == member_nodes[flow.dst];
      alpha = std::max(alpha, intra ? costs.alpha_intra : costs.alpha_inter);
      const double seconds = flow.bytes * (intra ? costs.beta_intra : costs.beta_inter);
      touched.push_back(flow.src);
      touched.push_back(flow.dst);
      egress[flow.src] += seconds;
      ingress[flow.dst] += seconds;
    }
    double bandwidth = 0;
    for (int member : touched) {
      bandwidth = std::max({bandwidth, egress[member], ingress[member]});
      egress[member] = ingress[member] = 0;
    }
    touched.clear();
    total += phase.latency_steps * alpha + bandwidth;
  }
  return total;
}

// What NCCL itself would consider: rings and double binary trees for reductions, rings for
// all-gather and reduce-scatter, point-to-point for all-to-all; hierarchical stands for NCCL's
// multi-channel rings that spread a node's inter-node traffic over all its NICs. Pure alpha-beta
// would otherwise pick recursive halving-doubling or direct at every size (they have ring's
// bandwidth term with fewer latency terms), which NCCL never runs; they stay available by name.
static std::vector<Algorithm> nccl_candidates(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_reduce:
      return {Algorithm::ring, Algorithm::tree, Algorithm::hierarchical};
    case CollectiveKind::broadcast:  // NCCL broadcasts over rings only (trees are all-reduce's)
    case CollectiveKind::all_gather:
    case CollectiveKind::reduce_scatter:
      return {Algorithm::ring, Algorithm::hierarchical};
    case CollectiveKind::all_to_all:
      return {Algorithm::ring, Algorithm::hierarchical, Algorithm::direct};
  }
  return {Algorithm::ring};
}

Algorithm select_algorithm(CollectiveKind kind, const std::vector<int>& member_nodes, double bytes,
                           const LinkCosts& costs) {
  check_group_size(static_cast<long long>(member_nodes.size()));
  check_bytes(bytes);
  check_costs(costs);
  const int p = static_cast<int>(member_nodes.size());
  if (p == 1 || bytes == 0) return Algorithm::ring;  // nothing moves; any choice costs 0

  const NodeLayout layout = node_layout(member_nodes);
  Algorithm best = Algorithm::ring;
  double best_time = std::numeric_limits<double>::infinity();
  for (Algorithm algorithm : nccl_candidates(kind)) {
    if (!implements(algorithm, kind)) continue;
    if (algorithm == Algorithm::direct && p > kDirectMaxMembers) continue;
    if (algorithm == Algorithm::hierarchical && !layout.hierarchical()) continue;
    const double time = candidate_time(kind, algorithm, member_nodes, layout, bytes, costs);
    if (time < best_time * (1 - kTieTolerance)) {
      best = algorithm;
      best_time = time;
    }
  }
  return best;
}

}  // namespace stratsim::sim
