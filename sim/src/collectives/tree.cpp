// Trees: NCCL's double binary tree for all-reduce, a binomial tree for broadcast. Latency grows
// with log2 p instead of p, which is what small messages on many ranks need; the bandwidth term is
// worse than a ring's (an internal member sends n/2 up each of two trees and receives n/2 from
// each parent: 2 n beta against the ring's 2(p-1)/p n beta). NCCL builds two complementary trees
// so that every member is internal in at most one of them and the links are loaded about evenly.
// The binomial broadcast doubles the holders of the buffer each step: ceil(log2 p) (alpha + n beta).

#include "common.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace stratsim::sim::collectives {

using core::CollectiveKind;

// The double binary tree as NCCL builds it (trees.cc: ncclGetBtree, ncclGetDtree).

namespace {

// Parent of `rank` in NCCL's binary tree over [0, p) rooted at 0: the tree alternates leaves (odd
// ranks) and internal nodes (even ranks). A rank with lowest set bit b hangs under the rank one
// level up (bit 2b set, bit b cleared); when that is out of range it hangs under rank ^ b.
long long btree_parent(long long rank, long long p) {
  if (rank == 0) return -1;
  const long long bit = rank & -rank;
  const long long up = (rank ^ bit) | (bit << 1);
  return up < p ? up : rank ^ bit;
}

}  // namespace

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

namespace {

// Depth in edges of one tree, by memoised walks to the root (O(p)).
int tree_depth(int tree, int p) {
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

}  // namespace

int dtree_busiest_flows(int p) {
  // Each member sends one half-buffer flow up each tree it has a parent in (reduce) and one down to
  // each child (broadcast); it receives the mirror image, so egress and ingress are equal.
  std::vector<int> flows(p, 0);
  for (int tree = 0; tree < 2; ++tree)
    for (int rank = 0; rank < p; ++rank)
      if (const int parent = dtree_parent(tree, rank, p); parent >= 0) ++flows[rank], ++flows[parent];
  return *std::max_element(flows.begin(), flows.end());
}

int dtree_depth(int p) { return std::max(tree_depth(0, p), tree_depth(1, p)); }

namespace {

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

}  // namespace

// All-reduce: each tree carries half the buffer. One phase reduces up both trees, one broadcasts
// down them; each phase stands for the deeper tree's depth in latency steps.
// Folded (full > p), the trees span the simulated members with the full trees' depth: every
// member still sends and receives what it would (one parent and at most two children per tree).
Schedule tree_all_reduce(int p, double bytes, int full) {
  const int depth = dtree_depth(full);
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

Schedule tree_schedule(CollectiveKind kind, int p, double bytes) {
  return kind == CollectiveKind::all_reduce ? tree_all_reduce(p, bytes, p) : binomial_broadcast(p, bytes);
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

}  // namespace stratsim::sim::collectives
