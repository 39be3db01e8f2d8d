// Collective schedules against their closed forms (simulators.md section 5), the per-member byte
// counts every correct algorithm must move, and the selector's choices. No SimGrid here: the
// engine's exactness tests check that simulated idle-platform times equal estimate_time.
#include "stratsim/sim/collective.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

using namespace stratsim::sim;
using stratsim::core::CollectiveKind;

namespace {

constexpr double kAlpha = 2e-6;
constexpr double kBeta = 1.0 / 50e9;
constexpr double KiB = 1024.0, MiB = KiB * 1024, GiB = MiB * 1024;
const LinkCosts kUniform{kAlpha, kBeta, kAlpha, kBeta};
// NVLink-like inside a node, one 200 Gb/s NIC per GPU across nodes.
const LinkCosts kTwoTier{1e-6, 1.0 / 300e9, 5e-6, 1.0 / 25e9};

const std::vector<CollectiveKind> kKinds = {CollectiveKind::all_reduce, CollectiveKind::all_gather,
                                            CollectiveKind::reduce_scatter, CollectiveKind::broadcast,
                                            CollectiveKind::all_to_all};
const std::vector<Algorithm> kFlat = {Algorithm::ring, Algorithm::tree, Algorithm::recursive_halving_doubling,
                                      Algorithm::direct, Algorithm::chain};
const std::vector<double> kSizes = {KiB, MiB, 64 * MiB, 8 * GiB};

// Every member on its own node: the flat algorithms do not care, hierarchical is not applicable.
std::vector<int> own_nodes(int p) {
  std::vector<int> nodes(p);
  for (int i = 0; i < p; ++i) nodes[i] = i;
  return nodes;
}

// m nodes of g consecutive members.
std::vector<int> blocked_nodes(int g, int m) {
  std::vector<int> nodes(g * m);
  for (int i = 0; i < g * m; ++i) nodes[i] = i / g;
  return nodes;
}

// m nodes, members dealt round-robin: node i % m, so local indices are i / m.
std::vector<int> interleaved_nodes(int g, int m) {
  std::vector<int> nodes(g * m);
  for (int i = 0; i < g * m; ++i) nodes[i] = i % m;
  return nodes;
}

bool is_power_of_two(int p) { return (p & (p - 1)) == 0; }
int ceil_log2(int p) {
  int k = 0;
  while ((1 << k) < p) ++k;
  return k;
}

std::string describe(CollectiveKind kind, Algorithm algorithm, int p, double bytes) {
  return std::string(stratsim::core::collective_kind_name(kind)) + " " + std::string(algorithm_name(algorithm)) +
         " p=" + std::to_string(p) + " n=" + std::to_string(bytes);
}

void expect_relative(double actual, double expected, double tolerance = 1e-9) {
  EXPECT_NEAR(actual, expected, tolerance * std::max(std::abs(expected), 1e-30)) << "expected " << expected;
}

struct Traffic {
  std::vector<double> egress, ingress;
  bool well_formed = true;  // indices in range, no self flows, positive bytes, non-empty phases
  std::size_t flows = 0;
};

Traffic traffic_of(const Schedule& schedule, int p) {
  Traffic traffic{std::vector<double>(p, 0.0), std::vector<double>(p, 0.0)};
  for (const SchedulePhase& phase : schedule.phases) {
    traffic.well_formed = traffic.well_formed && !phase.flows.empty() && phase.latency_steps >= 1;
    for (const Flow& flow : phase.flows) {
      const bool ok = flow.src >= 0 && flow.src < p && flow.dst >= 0 && flow.dst < p && flow.src != flow.dst &&
                      flow.bytes > 0 && std::isfinite(flow.bytes);
      traffic.well_formed = traffic.well_formed && ok;
      if (!ok) continue;
      traffic.egress[flow.src] += flow.bytes;
      traffic.ingress[flow.dst] += flow.bytes;
    }
    traffic.flows += phase.flows.size();
  }
  return traffic;
}

// True when every value is within 1e-9 relative of `expected`.
bool all_equal(const std::vector<double>& values, double expected) {
  for (double v : values)
    if (std::abs(v - expected) > 1e-9 * expected) return false;
  return true;
}

bool all_at_least(const std::vector<double>& values, double bound, std::size_t from = 0) {
  for (std::size_t i = from; i < values.size(); ++i)
    if (values[i] < bound * (1 - 1e-9)) return false;
  return true;
}

// Bytes every correct algorithm must move per member, and the exact counts of those that are
// bandwidth-optimal.
void check_conservation(CollectiveKind kind, Algorithm algorithm, int p, double n, const Traffic& t) {
  const double share = (p - 1) * (n / p);
  const bool rhd = algorithm == Algorithm::recursive_halving_doubling;
  const bool folded_rhd = rhd && !is_power_of_two(p);
  switch (kind) {
    case CollectiveKind::all_reduce: {
      EXPECT_TRUE(all_at_least(t.egress, share) && all_at_least(t.ingress, share));
      // Trees are not bandwidth-optimal, nor are hierarchical and NVLSTree across nodes: they run a
      // tree per rail (and NVLS's flows stand for the switch's, n (1 + 1/g) per member).
      const bool optimal = algorithm != Algorithm::tree && algorithm != Algorithm::chain &&
                           algorithm != Algorithm::hierarchical && algorithm != Algorithm::nvls_tree && !folded_rhd;
      if (optimal) {
        EXPECT_TRUE(all_equal(t.egress, 2 * share) && all_equal(t.ingress, 2 * share));
      }
      break;
    }
    case CollectiveKind::all_gather:
      EXPECT_TRUE(all_at_least(t.ingress, share));  // every other member's block arrives
      if (!folded_rhd) {
        EXPECT_TRUE(all_equal(t.egress, share) && all_equal(t.ingress, share));
      }
      break;
    case CollectiveKind::reduce_scatter:
      EXPECT_TRUE(all_at_least(t.egress, share));  // every contribution to another block leaves
      if (!folded_rhd) {
        EXPECT_TRUE(all_equal(t.egress, share) && all_equal(t.ingress, share));
      }
      break;
    case CollectiveKind::broadcast:
      EXPECT_TRUE(all_at_least(t.ingress, n, 1));  // every non-root gets the whole buffer
      EXPECT_GE(t.egress[0], n * (1 - 1e-9));
      break;
    case CollectiveKind::all_to_all:
      EXPECT_TRUE(all_at_least(t.egress, share) && all_at_least(t.ingress, share));
      // Hierarchical relays through the same-rail peer; its counts are checked with its shape.
      if (algorithm == Algorithm::ring || algorithm == Algorithm::direct) {
        EXPECT_TRUE(all_equal(t.egress, share) && all_equal(t.ingress, share));
      }
      if (rhd && is_power_of_two(p)) {
        EXPECT_TRUE(all_equal(t.egress, ceil_log2(p) * n / 2));  // Bruck: n/2 a step
      }
      break;
    case CollectiveKind::scatter:  // the root sends every other member its block, nothing else moves
      EXPECT_NEAR(t.egress[0], share, share * 1e-9);
      EXPECT_TRUE(all_at_least(t.ingress, n / p, 1));
      EXPECT_NEAR(t.ingress[0], 0, 1e-9);
      break;
  }
}

// Lower bounds of simulators.md section 5, on the closed form split into alpha and beta terms.
void check_lower_bounds(CollectiveKind kind, Algorithm algorithm, int p, double n) {
  const double latency_terms = closed_form_time(kind, algorithm, p, n, 1.0, 0.0);
  const double bandwidth_bytes = closed_form_time(kind, algorithm, p, n, 0.0, 1.0);
  // The log2 p latency bound is for single-port algorithms (one message out per step); direct
  // sends its p-1 messages in one step.
  if (algorithm != Algorithm::direct) {
    EXPECT_GE(latency_terms, ceil_log2(p));
  }
  const double share = (p - 1) * (n / p);
  switch (kind) {
    case CollectiveKind::all_reduce:
      EXPECT_GE(bandwidth_bytes, 2 * share * (1 - 1e-12));
      break;
    case CollectiveKind::all_gather:
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::all_to_all:
    case CollectiveKind::scatter:
      EXPECT_GE(bandwidth_bytes, share * (1 - 1e-12));
      break;
    case CollectiveKind::broadcast:
      EXPECT_GE(bandwidth_bytes, n * (1 - 1e-12));
      break;
  }
}

}  // namespace

TEST(CollectiveNames, RoundTripAndAliases) {
  for (Algorithm a :
       {Algorithm::automatic, Algorithm::ring, Algorithm::tree, Algorithm::recursive_halving_doubling,
        Algorithm::direct, Algorithm::hierarchical, Algorithm::nvls, Algorithm::nvls_tree, Algorithm::chain})
    EXPECT_EQ(parse_algorithm(algorithm_name(a)), a);
  EXPECT_EQ(algorithm_name(Algorithm::chain), "chain");
  EXPECT_EQ(algorithm_name(Algorithm::nvls_tree), "nvls_tree");
  EXPECT_EQ(parse_algorithm("NVLSTree"), Algorithm::nvls_tree);  // as NCCL_ALGO spells it
  EXPECT_EQ(parse_algorithm("nvls-tree"), Algorithm::nvls_tree);
  EXPECT_EQ(algorithm_name(Algorithm::automatic), "auto");
  EXPECT_EQ(algorithm_name(Algorithm::recursive_halving_doubling), "rhd");
  EXPECT_EQ(parse_algorithm("recursive_halving_doubling"), Algorithm::recursive_halving_doubling);
  EXPECT_EQ(parse_algorithm("halving-doubling"), Algorithm::recursive_halving_doubling);
  EXPECT_EQ(parse_algorithm("double_binary_tree"), Algorithm::tree);
  EXPECT_EQ(parse_algorithm("Ring"), Algorithm::ring);
  EXPECT_EQ(parse_algorithm("NVLS"), Algorithm::nvls);
  EXPECT_EQ(parse_algorithm("collnet"), std::nullopt);
  EXPECT_EQ(parse_algorithm(""), std::nullopt);
}

TEST(CollectiveImplements, TreeHasAllReduceAndBroadcastOnly) {
  for (CollectiveKind kind : kKinds) {
    const bool tree_kind = kind == CollectiveKind::all_reduce || kind == CollectiveKind::broadcast;
    EXPECT_EQ(implements(Algorithm::tree, kind), tree_kind);
    EXPECT_EQ(implements(Algorithm::chain, kind), kind == CollectiveKind::all_reduce);
    for (Algorithm a : {Algorithm::ring, Algorithm::recursive_halving_doubling, Algorithm::direct,
                        Algorithm::hierarchical, Algorithm::automatic})
      EXPECT_TRUE(implements(a, kind));
  }
}

// A scatter (DTensor's distribute_tensor from rank 0) runs direct only, as NCCL's grouped sends and
// Gloo's one-to-all do: one latency and (p-1)/p of the buffer through the root's egress.
TEST(CollectiveSchedules, ScatterIsDirectFromTheRoot) {
  for (Algorithm a : {Algorithm::ring, Algorithm::tree, Algorithm::recursive_halving_doubling, Algorithm::hierarchical,
                      Algorithm::nvls})
    EXPECT_FALSE(implements(a, CollectiveKind::scatter)) << algorithm_name(a);
  EXPECT_TRUE(implements(Algorithm::direct, CollectiveKind::scatter));
  for (int p : {2, 3, 4, 8, 64}) {
    const std::vector<int> nodes = own_nodes(p);
    EXPECT_EQ(select_algorithm(CollectiveKind::scatter, nodes, MiB, kUniform), Algorithm::direct);
    for (double n : kSizes) {
      SCOPED_TRACE(describe(CollectiveKind::scatter, Algorithm::direct, p, n));
      const Schedule schedule = build_schedule(CollectiveKind::scatter, Algorithm::direct, nodes, n);
      expect_relative(estimate_time(schedule, nodes, kUniform),
                      closed_form_time(CollectiveKind::scatter, Algorithm::direct, p, n, kAlpha, kBeta));
      // By hand: one alpha, (p-1)/p n beta.
      expect_relative(closed_form_time(CollectiveKind::scatter, Algorithm::direct, p, n, kAlpha, kBeta),
                      kAlpha + (p - 1) * (n / p) * kBeta);
      const Traffic traffic = traffic_of(schedule, p);
      EXPECT_TRUE(traffic.well_formed);
      check_conservation(CollectiveKind::scatter, Algorithm::direct, p, n, traffic);
      check_lower_bounds(CollectiveKind::scatter, Algorithm::direct, p, n);
    }
  }
}

// The central property: on a uniform platform the schedule's estimate is its closed form, the
// schedule is well formed and moves the bytes the collective needs, and the closed form respects
// the section 5 lower bounds.
TEST(CollectiveSchedules, EstimateEqualsClosedFormOnUniformPlatform) {
  for (int p : {2, 3, 4, 5, 7, 8, 16, 64, 256, 1024, 4096}) {
    const std::vector<int> nodes = own_nodes(p);
    for (CollectiveKind kind : kKinds) {
      for (Algorithm algorithm : kFlat) {
        if (!implements(algorithm, kind)) continue;
        if (algorithm == Algorithm::direct && p > 256) continue;  // p(p-1) flows per phase
        // Pairwise all-to-all is p(p-1) flows in all (16.8M at 4096): one size at the largest p.
        const bool pairwise = algorithm == Algorithm::ring && kind == CollectiveKind::all_to_all;
        const bool one_size_only = pairwise && p > 1024;
        for (double n : kSizes) {
          if (one_size_only && n != MiB) continue;
          SCOPED_TRACE(describe(kind, algorithm, p, n));
          const Schedule schedule = build_schedule(kind, algorithm, nodes, n);
          EXPECT_EQ(schedule.kind, kind);
          EXPECT_EQ(schedule.algorithm, algorithm);
          expect_relative(estimate_time(schedule, nodes, kUniform),
                          closed_form_time(kind, algorithm, p, n, kAlpha, kBeta));
          const Traffic traffic = traffic_of(schedule, p);
          EXPECT_TRUE(traffic.well_formed);
          check_conservation(kind, algorithm, p, n, traffic);
          check_lower_bounds(kind, algorithm, p, n);
        }
      }
    }
  }
}

// Flows per phase stay O(p) for the scalable algorithms.
TEST(CollectiveSchedules, FlowCountsPerPhase) {
  const int p = 4096;
  const std::vector<int> nodes = own_nodes(p);
  for (CollectiveKind kind : kKinds) {
    for (Algorithm algorithm : {Algorithm::ring, Algorithm::tree, Algorithm::recursive_halving_doubling}) {
      if (!implements(algorithm, kind) || (algorithm == Algorithm::ring && kind == CollectiveKind::all_to_all))
        continue;
      SCOPED_TRACE(describe(kind, algorithm, p, MiB));
      for (const SchedulePhase& phase : build_schedule(kind, algorithm, nodes, MiB).phases)
        EXPECT_LE(phase.flows.size(), static_cast<std::size_t>(2 * p));
    }
  }
  const std::vector<int> two_tier = blocked_nodes(8, p / 8);
  for (CollectiveKind kind : kKinds) {
    if (kind == CollectiveKind::all_to_all) continue;  // p(g-1) + p(m-1) flows by design
    for (const SchedulePhase& phase : build_schedule(kind, Algorithm::hierarchical, two_tier, MiB).phases)
      EXPECT_LE(phase.flows.size(), static_cast<std::size_t>(2 * p));  // a rail's two trees: 2 (m-1) flows
  }
  const Schedule pairwise = build_schedule(CollectiveKind::all_to_all, Algorithm::ring, own_nodes(64), MiB);
  EXPECT_EQ(pairwise.phases.size(), 63u);
  for (const SchedulePhase& phase : pairwise.phases) EXPECT_EQ(phase.flows.size(), 64u);
}

TEST(CollectiveSchedules, SingleMemberAndZeroBytesAreEmpty) {
  for (CollectiveKind kind : kKinds) {
    for (Algorithm algorithm : kFlat) {
      if (!implements(algorithm, kind)) continue;
      EXPECT_TRUE(build_schedule(kind, algorithm, {7}, GiB).phases.empty());
      EXPECT_TRUE(build_schedule(kind, algorithm, own_nodes(8), 0).phases.empty());
      EXPECT_EQ(closed_form_time(kind, algorithm, 1, GiB, kAlpha, kBeta), 0);
      EXPECT_EQ(closed_form_time(kind, algorithm, 8, 0, kAlpha, kBeta), 0);
    }
    EXPECT_TRUE(build_schedule(kind, Algorithm::hierarchical, blocked_nodes(2, 2), 0).phases.empty());
  }
}

// Spot values of the closed forms, worked by hand, so a wrong derivation cannot hide behind a
// schedule built the same wrong way. a = alpha terms, b = bytes terms (n = 1).
TEST(CollectiveClosedForms, HandWorkedValues) {
  auto latency = [](CollectiveKind k, Algorithm a, int p) { return closed_form_time(k, a, p, 1.0, 1.0, 0.0); };
  auto bandwidth = [](CollectiveKind k, Algorithm a, int p) { return closed_form_time(k, a, p, 1.0, 0.0, 1.0); };
  const auto AR = CollectiveKind::all_reduce, RS = CollectiveKind::reduce_scatter, AG = CollectiveKind::all_gather,
             BC = CollectiveKind::broadcast, A2A = CollectiveKind::all_to_all;
  const auto tree = Algorithm::tree, rhd = Algorithm::recursive_halving_doubling;
  // Double binary tree: 2 ceil(log2 p) a + 2 n b (n b at p = 2).
  EXPECT_DOUBLE_EQ(latency(AR, tree, 2), 2);
  EXPECT_DOUBLE_EQ(bandwidth(AR, tree, 2), 1);
  EXPECT_DOUBLE_EQ(latency(AR, tree, 3), 4);
  EXPECT_DOUBLE_EQ(bandwidth(AR, tree, 3), 2);
  EXPECT_DOUBLE_EQ(latency(AR, tree, 5), 6);
  EXPECT_DOUBLE_EQ(latency(AR, tree, 16), 8);
  EXPECT_DOUBLE_EQ(bandwidth(AR, tree, 16), 2);
  EXPECT_DOUBLE_EQ(closed_form_time(BC, tree, 5, 1.0, 1.0, 1.0), 3 * 2);  // binomial: 3 (a + n b)
  // Chain (NCCL's tree inside a node), pipelined: (2 (p - 1) - 1) a + 2 n b (n b at p = 2).
  EXPECT_DOUBLE_EQ(latency(AR, Algorithm::chain, 2), 1);
  EXPECT_DOUBLE_EQ(bandwidth(AR, Algorithm::chain, 2), 1);
  EXPECT_DOUBLE_EQ(latency(AR, Algorithm::chain, 8), 13);
  EXPECT_DOUBLE_EQ(bandwidth(AR, Algorithm::chain, 8), 2);
  // rhd, p = 3 (q = 2, r = 1).
  EXPECT_DOUBLE_EQ(latency(AR, rhd, 3), 4);    // fold, RS, AG, unfold
  EXPECT_DOUBLE_EQ(bandwidth(AR, rhd, 3), 3);  // n + n/2 + n/2 + n
  EXPECT_DOUBLE_EQ(latency(RS, rhd, 3), 3);
  EXPECT_DOUBLE_EQ(bandwidth(RS, rhd, 3), 2);            // n + 2n/3 (two blocks) + n/3
  EXPECT_DOUBLE_EQ(bandwidth(AG, rhd, 3), 1 + 2.0 / 3);  // n/3 + 2n/3 + 2n/3
  EXPECT_DOUBLE_EQ(bandwidth(BC, rhd, 3), 2);            // n/2 + n/2 + n
  // rhd, p = 6 (q = 4, r = 2): halving sends ceil(6/2) then ceil(6/4) blocks of n/6.
  EXPECT_DOUBLE_EQ(bandwidth(RS, rhd, 6), 1 + 5.0 / 6 + 1.0 / 6);
  EXPECT_DOUBLE_EQ(latency(RS, rhd, 6), 4);
  // Power-of-two rhd is Rabenseifner: 2 log2p a + 2(p-1)/p n b.
  EXPECT_DOUBLE_EQ(latency(AR, rhd, 8), 6);
  EXPECT_DOUBLE_EQ(bandwidth(AR, rhd, 8), 2 * 7.0 / 8);
  EXPECT_DOUBLE_EQ(bandwidth(BC, rhd, 8), 2 * 7.0 / 8);
  // Bruck: ceil(log2 p) a + (sum of popcounts below p)/p n b; log2p/2 n b for a power of two.
  EXPECT_DOUBLE_EQ(latency(A2A, rhd, 3), 2);
  EXPECT_DOUBLE_EQ(bandwidth(A2A, rhd, 3), 2.0 / 3);
  EXPECT_DOUBLE_EQ(bandwidth(A2A, rhd, 16), 2);
  EXPECT_DOUBLE_EQ(bandwidth(A2A, rhd, 5), 5.0 / 5);  // popcounts 0,1,1,2,1
  // Direct broadcast is bound by the root's egress.
  EXPECT_DOUBLE_EQ(bandwidth(BC, Algorithm::direct, 5), 4);
  EXPECT_DOUBLE_EQ(latency(BC, Algorithm::direct, 5), 1);
}

// NCCL's tree inside one node is a chain through its members: the reduce runs down the chain to
// member 0 and the broadcast back up, p - 1 hops each, pipelined, every member with at most one flow
// each way per phase.
TEST(CollectiveChain, ShapeIsAPipelinedChainOfTheMembers) {
  for (int p : {2, 3, 8}) {
    SCOPED_TRACE(p);
    const Schedule schedule = build_schedule(CollectiveKind::all_reduce, Algorithm::chain, std::vector<int>(p, 0), MiB);
    EXPECT_TRUE(schedule.pipelined);
    ASSERT_EQ(schedule.phases.size(), 2u);
    for (const SchedulePhase& phase : schedule.phases) {
      EXPECT_EQ(phase.latency_steps, p - 1);
      ASSERT_EQ(phase.flows.size(), static_cast<std::size_t>(p - 1));
      for (const Flow& flow : phase.flows) {
        EXPECT_EQ(std::abs(flow.src - flow.dst), 1);
        EXPECT_EQ(flow.bytes, MiB);
      }
    }
    EXPECT_LT(schedule.phases[0].flows.front().dst, schedule.phases[0].flows.front().src);  // reduce: towards 0
    EXPECT_GT(schedule.phases[1].flows.front().dst, schedule.phases[1].flows.front().src);  // broadcast: away
  }
}

// The selector offers NCCL's tree the way NCCL runs it: the chain inside one node, the double
// binary tree across nodes. With latency free, both move 2 n per member and the ring 2 (p-1)/p n,
// so neither wins; with NVLink-like costs and many tiny all-reduces, the tree's latency decides.
TEST(CollectiveChain, TheSelectorOffersItInsideOneNodeOnly) {
  const LinkCosts latency_bound{1e-6, 1e-15, 1e-6, 1e-15};
  const std::vector<int> one_node(8, 0);
  for (double n : {1.0, KiB, MiB, GiB}) {
    EXPECT_NE(select_algorithm(CollectiveKind::all_reduce, one_node, n, latency_bound), Algorithm::tree) << n;
    EXPECT_NE(select_algorithm(CollectiveKind::all_reduce, own_nodes(64), n, latency_bound), Algorithm::chain) << n;
  }
  // Across 64 nodes of one member each, the binary tree's 2 log2 p steps beat the ring's 2 (p-1).
  EXPECT_EQ(select_algorithm(CollectiveKind::all_reduce, own_nodes(64), 1.0, latency_bound), Algorithm::tree);
  // Inside a node of 8 the chain's 13 steps lose to the ring's 14 only by one: the chain is chosen
  // for the tiniest buffer, and with bandwidth mattering, the ring.
  EXPECT_EQ(select_algorithm(CollectiveKind::all_reduce, one_node, 1.0, latency_bound), Algorithm::chain);
  EXPECT_EQ(select_algorithm(CollectiveKind::all_reduce, one_node, GiB, kTwoTier), Algorithm::ring);
  // Two members: the chain would win every size by one route latency; NCCL runs the ring there.
  for (double n : {1.0, MiB, GiB})
    EXPECT_EQ(select_algorithm(CollectiveKind::all_reduce, std::vector<int>(2, 0), n, latency_bound), Algorithm::ring)
        << n;
}

// NCCL's double binary tree: two spanning trees of depth ceil(log2 p); no member has more than
// two flows in or out per phase, and every member is internal in at most one tree (odd p: all
// but member 0, as in NCCL).
TEST(CollectiveTree, DoubleBinaryTreeShape) {
  for (int p : {2, 3, 4, 5, 6, 7, 8, 13, 14, 16, 100, 1000, 1024}) {
    SCOPED_TRACE(p);
    const Schedule schedule = build_schedule(CollectiveKind::all_reduce, Algorithm::tree, own_nodes(p), MiB);
    ASSERT_EQ(schedule.phases.size(), 2u);
    const SchedulePhase& reduce = schedule.phases[0];
    EXPECT_EQ(reduce.latency_steps, ceil_log2(p));
    EXPECT_EQ(schedule.phases[1].latency_steps, ceil_log2(p));
    EXPECT_EQ(reduce.flows.size(), static_cast<std::size_t>(2 * (p - 1)));  // two spanning trees
    // Flows are listed tree by tree, each tree one flow per non-root member.
    std::vector<int> in(p, 0), out(p, 0), children[2] = {std::vector<int>(p, 0), std::vector<int>(p, 0)};
    for (std::size_t f = 0; f < reduce.flows.size(); ++f) {
      const Flow& flow = reduce.flows[f];
      ++out[flow.src];
      ++in[flow.dst];
      ++children[f < static_cast<std::size_t>(p - 1) ? 0 : 1][flow.dst];
      EXPECT_DOUBLE_EQ(flow.bytes, MiB / 2);
    }
    for (int i = 0; i < p; ++i) {
      EXPECT_LE(out[i], 2);
      EXPECT_LE(in[i], 2);
      EXPECT_LE(children[0][i], 2);
      EXPECT_LE(children[1][i], 2);
      // Internal in both trees only for odd p, and then only member 0 (NCCL's shifted tree).
      const bool internal_in_both = children[0][i] > 0 && children[1][i] > 0;
      EXPECT_TRUE(!internal_in_both || (p % 2 == 1 && i == 0)) << "member " << i;
    }
    // The broadcast phase mirrors the reduce phase.
    ASSERT_EQ(schedule.phases[1].flows.size(), reduce.flows.size());
    for (std::size_t f = 0; f < reduce.flows.size(); ++f) {
      EXPECT_EQ(schedule.phases[1].flows[f].src, reduce.flows[f].dst);
      EXPECT_EQ(schedule.phases[1].flows[f].dst, reduce.flows[f].src);
    }
  }
}

TEST(CollectiveRhd, NonPowerOfTwoFoldsIntoCore) {
  const Schedule schedule =
      build_schedule(CollectiveKind::all_reduce, Algorithm::recursive_halving_doubling, own_nodes(6), 6 * MiB);
  ASSERT_EQ(schedule.phases.size(), 6u);  // fold, 2 RS steps, 2 AG steps, unfold
  EXPECT_EQ(schedule.phases.front().label, "fold");
  EXPECT_EQ(schedule.phases.back().label, "unfold");
  ASSERT_EQ(schedule.phases.front().flows.size(), 2u);
  EXPECT_EQ(schedule.phases.front().flows[0].src, 4);
  EXPECT_EQ(schedule.phases.front().flows[0].dst, 0);
  EXPECT_DOUBLE_EQ(schedule.phases.front().flows[0].bytes, 6 * MiB);
  for (std::size_t i = 1; i + 1 < schedule.phases.size(); ++i)
    for (const Flow& flow : schedule.phases[i].flows) EXPECT_LT(std::max(flow.src, flow.dst), 4);
}

// The ring across nodes (a channel per NIC) against its own closed form, blocked and interleaved
// nodes: every member sends and receives exactly a flat ring's bytes, (g-1)/g of them on NVLink
// and 1/g through its NIC, and each phase is all-intra or all-inter.
TEST(CollectiveRingAcrossNodes, EstimateEqualsClosedFormAndConservesBytes) {
  for (int g : {2, 4, 8}) {
    for (int m : {2, 3, 4, 16}) {
      const int p = g * m;
      for (const std::vector<int>& nodes : {blocked_nodes(g, m), interleaved_nodes(g, m)}) {
        for (CollectiveKind kind :
             {CollectiveKind::all_reduce, CollectiveKind::all_gather, CollectiveKind::reduce_scatter}) {
          for (double n : kSizes) {
            SCOPED_TRACE(describe(kind, Algorithm::ring, p, n) + " g=" + std::to_string(g));
            const Schedule schedule = build_schedule(kind, Algorithm::ring, nodes, n);
            expect_relative(estimate_time(schedule, nodes, kTwoTier),
                            ring_across_nodes_closed_form_time(kind, g, m, n, kTwoTier));
            const Traffic traffic = traffic_of(schedule, p);
            EXPECT_TRUE(traffic.well_formed);
            check_conservation(kind, Algorithm::ring, p, n, traffic);
            ASSERT_EQ(schedule.phases.size(), 2u);
            const double ring_bytes = (kind == CollectiveKind::all_reduce ? 2 : 1) * (p - 1) * (n / p);
            for (const SchedulePhase& phase : schedule.phases) {
              const bool intra = nodes[phase.flows.front().src] == nodes[phase.flows.front().dst];
              for (const Flow& flow : phase.flows) {
                EXPECT_EQ(nodes[flow.src] == nodes[flow.dst], intra);
                EXPECT_NEAR(flow.bytes, ring_bytes * (intra ? g - 1.0 : 1.0) / g, 1e-9 * ring_bytes);
              }
              EXPECT_EQ(phase.flows.size(), static_cast<std::size_t>(p));
            }
          }
        }
      }
    }
  }
  // Broadcast keeps its one chain and all-to-all its pairwise steps; an uneven layout or one
  // member per node keeps the flat ring.
  EXPECT_EQ(build_schedule(CollectiveKind::broadcast, Algorithm::ring, blocked_nodes(4, 2), MiB).phases.size(), 1u);
  EXPECT_FALSE(build_schedule(CollectiveKind::all_reduce, Algorithm::ring, {0, 0, 1}, MiB).pipelined);
  EXPECT_FALSE(build_schedule(CollectiveKind::all_reduce, Algorithm::ring, own_nodes(8), MiB).pipelined);
  EXPECT_THROW(ring_across_nodes_closed_form_time(CollectiveKind::broadcast, 8, 2, MiB, kTwoTier),
               std::invalid_argument);
  EXPECT_THROW(ring_across_nodes_closed_form_time(CollectiveKind::all_reduce, 8, 1, MiB, kTwoTier),
               std::invalid_argument);
}

// Hand-worked: 2 nodes of 8, n = 8 GiB all-reduce, kTwoTier (NVLink 1 us, 300 GB/s; NIC 5 us,
// 25 GB/s). R = 2 x 15/16 x 8 GiB = 16,106,127,360 B. Steps: 2(16-2) = 28 inside, 2 across.
// NVLink: 1 us + 7/8 R / 300e9 = 46.977 ms; NIC: 5 us + R/8 / 25e9 = 80.536 ms (decides).
// Total 27 x 1 us + 1 x 5 us + 80.536 ms.
TEST(CollectiveRingAcrossNodes, HandWorkedValue) {
  const double ring_bytes = 2 * 15.0 / 16 * 8 * GiB;
  const double expected = 27e-6 + 5e-6 + 5e-6 + ring_bytes / 8 / 25e9;
  EXPECT_NEAR(ring_across_nodes_closed_form_time(CollectiveKind::all_reduce, 8, 2, 8 * GiB, kTwoTier), expected, 1e-12);
  EXPECT_NEAR(expected, 0.080568, 1e-6);
}

// Hierarchical against its own closed form, two-tier and uniform, node members consecutive or
// dealt round-robin (local index is the order within the node either way).
TEST(CollectiveHierarchical, EstimateEqualsClosedForm) {
  for (int g : {2, 4, 8}) {
    for (int m : {2, 3, 4, 16}) {
      const int p = g * m;
      for (const std::vector<int>& nodes : {blocked_nodes(g, m), interleaved_nodes(g, m)}) {
        for (CollectiveKind kind : kKinds) {
          for (double n : kSizes) {
            SCOPED_TRACE(describe(kind, Algorithm::hierarchical, p, n) + " g=" + std::to_string(g));
            const Schedule schedule = build_schedule(kind, Algorithm::hierarchical, nodes, n);
            expect_relative(estimate_time(schedule, nodes, kTwoTier),
                            hierarchical_closed_form_time(kind, g, m, n, kTwoTier));
            expect_relative(estimate_time(schedule, nodes, kUniform),
                            hierarchical_closed_form_time(kind, g, m, n, kUniform));
            const Traffic traffic = traffic_of(schedule, p);
            EXPECT_TRUE(traffic.well_formed);
            check_conservation(kind, Algorithm::hierarchical, p, n, traffic);
            if (kind == CollectiveKind::all_to_all) {  // n/g to each of g-1 peers, n/m to each of m-1
              const double relayed = (g - 1) * (n / g) + (m - 1) * (n / m);
              EXPECT_TRUE(all_equal(traffic.egress, relayed) && all_equal(traffic.ingress, relayed));
            }
            // Phases are all-intra or all-inter: that is what makes the closed form exact.
            for (const SchedulePhase& phase : schedule.phases) {
              const bool intra = nodes[phase.flows.front().src] == nodes[phase.flows.front().dst];
              for (const Flow& flow : phase.flows) EXPECT_EQ(nodes[flow.src] == nodes[flow.dst], intra);
            }
          }
        }
      }
    }
  }
}

// Uniform costs: pipelined, the NVLink stages (2 (g-1)/g n) and the rail's tree move at once over
// their own links, so with equal link rates the NVLink stages decide: 1.75 n on 8 x 4, less than a
// flat ring's 2 (p-1)/p n = 1.94 n. With NICs 16 times slower the tree decides, and its busiest
// node sends 2, 3 or 4 half-shard flows on 2, 3 or 4 nodes (a ring per rail would send 2 (m-1)/m
// shards: 1, 1.33, 1.5). The latency: each stage's steps but the first fill the pipeline
// (2 (g-2) + 2 (ceil(log2 m) - 1)), plus one.
TEST(CollectiveHierarchical, UniformAllReducePipelinesItsStages) {
  const double n = GiB;
  const double bw = hierarchical_closed_form_time(CollectiveKind::all_reduce, 8, 4, n, {0, 1, 0, 1});
  EXPECT_NEAR(bw, 2.0 * 7 / 8 * n, 1e-6);
  const LinkCosts slow_nics{0, 1, 0, 16};
  for (int m : {2, 3, 4, 16}) {
    const double flows = m == 2 ? 2 : m == 3 ? 3 : 4;
    EXPECT_NEAR(hierarchical_closed_form_time(CollectiveKind::all_reduce, 8, m, n, slow_nics), flows * (n / 8 / 2) * 16,
                1e-6)
        << m << " nodes";
  }
  const double lat = hierarchical_closed_form_time(CollectiveKind::all_reduce, 8, 4, n, {1, 0, 1, 0});
  EXPECT_DOUBLE_EQ(lat, 2 * 6 + 2 * 1 + 1);
  EXPECT_DOUBLE_EQ(hierarchical_closed_form_time(CollectiveKind::all_reduce, 8, 16, n, {1, 0, 1, 0}),
                   2 * 6 + 2 * 3 + 1);
}

// A tree's chunks cross its hops one after another: the fill (seconds per byte of chunk) counts
// every latency step of a non-NVLS phase as a hop at its link's beta, less the slowest hop. 8 x 4
// with beta_i 1, beta_e 16: hierarchical's chains 2 x 7 hops inside, the trees 2 x 2 across:
// 14 + 4 x 16 - 16 = 62; NVLSTree the trees only: 3 x 16 = 48. Both keep chunks of at most half
// a rail's shard; rings, across nodes too, have no fill.
TEST(CollectiveChunkFill, TreesFillHopByHopAndRingsDoNot) {
  const double n = GiB;
  const std::vector<int> nodes = blocked_nodes(8, 4);
  const LinkCosts costs{0, 1, 0, 16};
  const Schedule tree = build_schedule(CollectiveKind::all_reduce, Algorithm::hierarchical, nodes, n);
  EXPECT_DOUBLE_EQ(chunk_fill(tree, nodes, costs), 2 * 7 + 4 * 16 - 16);
  EXPECT_DOUBLE_EQ(tree.chunk_limit, n / 8 / 2);
  const Schedule nvls_tree = build_schedule(CollectiveKind::all_reduce, Algorithm::nvls_tree, nodes, n);
  EXPECT_DOUBLE_EQ(chunk_fill(nvls_tree, nodes, costs), 3 * 16);
  const ScheduleCost parts = estimate_parts(nvls_tree, nodes, costs);
  EXPECT_DOUBLE_EQ(parts.fill, 3 * 16);
  EXPECT_DOUBLE_EQ(parts.chunk_limit, n / 8 / 2);
  // 2 nodes: one hop up, one down; the busiest is not counted.
  EXPECT_DOUBLE_EQ(chunk_fill(build_schedule(CollectiveKind::all_reduce, Algorithm::nvls_tree, blocked_nodes(8, 2), n),
                              blocked_nodes(8, 2), costs),
                   16);
  for (CollectiveKind kind : {CollectiveKind::all_reduce, CollectiveKind::all_gather}) {
    const Schedule ring = build_schedule(kind, Algorithm::ring, nodes, n);
    EXPECT_EQ(ring.chunk_limit, 0);
    EXPECT_EQ(chunk_fill(ring, nodes, costs), 0);
    EXPECT_EQ(estimate_parts(ring, nodes, costs).fill, 0);
  }
  EXPECT_EQ(build_schedule(CollectiveKind::all_gather, Algorithm::hierarchical, nodes, n).chunk_limit, 0);
}

// NVLSTree: each node's NVLS halves (all pairs of the node, flagged NVLS, n (1 + 1/g) on every
// member's link over both) beside the rails' trees, pipelined; its estimate is its closed form,
// with the NVLS halves at nvls_beta and the trees at the NIC's beta.
TEST(CollectiveNvlsTree, EstimateEqualsClosedForm) {
  LinkCosts costs = kTwoTier;
  costs.nvls_beta = costs.nvls_tree_beta = 1.0 / 200e9;
  for (int g : {2, 4, 8}) {
    for (int m : {2, 3, 4, 16}) {
      const int p = g * m;
      for (const std::vector<int>& nodes : {blocked_nodes(g, m), interleaved_nodes(g, m)}) {
        for (double n : kSizes) {
          SCOPED_TRACE(describe(CollectiveKind::all_reduce, Algorithm::nvls_tree, p, n) + " g=" + std::to_string(g));
          const Schedule schedule = build_schedule(CollectiveKind::all_reduce, Algorithm::nvls_tree, nodes, n);
          EXPECT_TRUE(schedule.pipelined);
          expect_relative(estimate_time(schedule, nodes, costs), nvls_tree_closed_form_time(g, m, n, costs));
          const Traffic traffic = traffic_of(schedule, p);
          EXPECT_TRUE(traffic.well_formed);
          check_conservation(CollectiveKind::all_reduce, Algorithm::nvls_tree, p, n, traffic);
          std::vector<double> nvls_out(p, 0.0), nvls_in(p, 0.0);
          for (const SchedulePhase& phase : schedule.phases) {
            for (const Flow& flow : phase.flows) {
              EXPECT_EQ(nodes[flow.src] == nodes[flow.dst], phase.nvls) << phase.label;  // NVLS inside only
              if (phase.nvls) nvls_out[flow.src] += flow.bytes, nvls_in[flow.dst] += flow.bytes;
            }
            if (phase.nvls) {
              EXPECT_EQ(phase.latency_steps, 1);
            }
          }
          EXPECT_TRUE(all_equal(nvls_out, n * (g + 1) / g) && all_equal(nvls_in, n * (g + 1) / g));
        }
      }
    }
  }
}

// Hand-worked on 8 x 2 with free latency: NVLS moves 9/8 n at nvls_tree_beta while the busiest
// NIC sends two half shards (n/8); the slower decides. The protocol's step count leaves the NVLS
// halves out (their cost is NVLS's launch), and the trees' latency fills the pipeline.
TEST(CollectiveNvlsTree, HandWorkedValues) {
  const double n = GiB;
  LinkCosts costs{0, 1, 0, 16};
  costs.nvls_tree_beta = 2;
  EXPECT_NEAR(nvls_tree_closed_form_time(8, 2, n, costs), 9.0 / 8 * n * 2, 1e-3);  // NVLS: 2.25 n
  costs.beta_inter = 32;
  EXPECT_NEAR(nvls_tree_closed_form_time(8, 2, n, costs), 2 * (n / 8 / 2) * 32, 1e-3);  // NIC: 4 n
  EXPECT_DOUBLE_EQ(nvls_tree_closed_form_time(8, 16, n, {1, 0, 1, 0, 0, 0, 0}), 2 * 3 + 1);
  const ScheduleCost parts =
      estimate_parts(build_schedule(CollectiveKind::all_reduce, Algorithm::nvls_tree, blocked_nodes(8, 16), n),
                     blocked_nodes(8, 16), {1, 1, 1, 1, 0, 1, 1});
  EXPECT_EQ(parts.intra_steps, 0);
  EXPECT_EQ(parts.inter_steps, 2 * 4);
  EXPECT_THROW(build_schedule(CollectiveKind::all_reduce, Algorithm::nvls_tree, std::vector<int>(8, 0), n),
               std::invalid_argument);
  EXPECT_THROW(build_schedule(CollectiveKind::all_gather, Algorithm::nvls_tree, blocked_nodes(8, 2), n),
               std::invalid_argument);
  EXPECT_THROW(closed_form_time(CollectiveKind::all_reduce, Algorithm::nvls_tree, 16, n, kAlpha, kBeta),
               std::invalid_argument);
  EXPECT_THROW(nvls_tree_closed_form_time(8, 1, n, costs), std::invalid_argument);
}

// The selector weighs it only where the switches reduce (nvls_tree_beta > 0) and the group spans
// nodes evenly; there it wins when NVLS inside the node is faster than the rings.
TEST(CollectiveSelect, NvlsTreeOnlyWhereTheSwitchesReduce) {
  const std::vector<int> nodes = blocked_nodes(8, 2);
  EXPECT_NE(select_algorithm(CollectiveKind::all_reduce, nodes, GiB, kTwoTier), Algorithm::nvls_tree);
  LinkCosts costs = kTwoTier;
  costs.alpha_inter = costs.alpha_intra;
  costs.beta_inter = costs.beta_intra * 4;  // the NICs have room: the node's stage decides
  costs.nvls_beta = costs.nvls_tree_beta = costs.beta_intra;
  EXPECT_EQ(select_algorithm(CollectiveKind::all_reduce, nodes, GiB, costs), Algorithm::nvls_tree);
  // 2.25 n against the ring's 7/8 x 2 x 15/16 n = 1.64 n on NVLink (its NICs carry 1/8 of it at a
  // quarter of the rate) and hierarchical's 1.75 n.
  costs.nvls_tree_beta = costs.beta_intra * 2;
  EXPECT_EQ(select_algorithm(CollectiveKind::all_reduce, nodes, GiB, costs), Algorithm::ring);
  costs.nvls_tree_beta = costs.beta_intra;
  EXPECT_NE(select_algorithm(CollectiveKind::all_reduce, std::vector<int>(16, 0), GiB, costs), Algorithm::nvls_tree);
  EXPECT_NE(select_algorithm(CollectiveKind::all_reduce, {0, 0, 0, 1, 1}, GiB, costs), Algorithm::nvls_tree);
}

TEST(CollectiveHierarchical, FlatOrUnevenGroupsAreRejected) {
  const auto AR = CollectiveKind::all_reduce;
  EXPECT_THROW(build_schedule(AR, Algorithm::hierarchical, own_nodes(8), MiB), std::invalid_argument);  // g = 1
  EXPECT_THROW(build_schedule(AR, Algorithm::hierarchical, std::vector<int>(8, 3), MiB),
               std::invalid_argument);                                                                     // m = 1
  EXPECT_THROW(build_schedule(AR, Algorithm::hierarchical, {0, 0, 0, 1, 1}, MiB), std::invalid_argument);  // uneven
  EXPECT_THROW(hierarchical_closed_form_time(AR, 1, 4, MiB, kTwoTier), std::invalid_argument);
  EXPECT_THROW(hierarchical_closed_form_time(AR, 4, 1, MiB, kTwoTier), std::invalid_argument);
  EXPECT_THROW(closed_form_time(AR, Algorithm::hierarchical, 8, MiB, kAlpha, kBeta), std::invalid_argument);
  // The selector never picks it for such groups.
  for (const std::vector<int>& nodes : {own_nodes(96), std::vector<int>(96, 0), std::vector<int>{0, 0, 0, 1, 1}})
    for (double n : kSizes)
      for (CollectiveKind kind : kKinds) EXPECT_NE(select_algorithm(kind, nodes, n, kTwoTier), Algorithm::hierarchical);
}

TEST(CollectiveValidation, InvalidRequestsThrow) {
  const auto AR = CollectiveKind::all_reduce, AG = CollectiveKind::all_gather;
  const std::vector<int> nodes = own_nodes(4);
  EXPECT_THROW(build_schedule(AG, Algorithm::tree, nodes, MiB), std::invalid_argument);
  EXPECT_THROW(build_schedule(CollectiveKind::all_to_all, Algorithm::tree, nodes, MiB), std::invalid_argument);
  EXPECT_THROW(build_schedule(AR, Algorithm::automatic, nodes, MiB), std::invalid_argument);
  EXPECT_THROW(build_schedule(AR, Algorithm::ring, {}, MiB), std::invalid_argument);
  EXPECT_THROW(build_schedule(AR, Algorithm::ring, nodes, -1), std::invalid_argument);
  EXPECT_THROW(build_schedule(AR, Algorithm::ring, nodes, std::nan("")), std::invalid_argument);
  EXPECT_THROW(closed_form_time(AG, Algorithm::tree, 4, MiB, kAlpha, kBeta), std::invalid_argument);
  EXPECT_THROW(closed_form_time(AR, Algorithm::ring, 0, MiB, kAlpha, kBeta), std::invalid_argument);
  EXPECT_THROW(closed_form_time(AR, Algorithm::automatic, 4, MiB, kAlpha, kBeta), std::invalid_argument);
  EXPECT_THROW(closed_form_time(AR, Algorithm::ring, 4, MiB, -1, kBeta), std::invalid_argument);
  EXPECT_THROW(select_algorithm(AR, {}, MiB, kUniform), std::invalid_argument);
  EXPECT_THROW(select_algorithm(AR, nodes, MiB, {kAlpha, -1, kAlpha, kBeta}), std::invalid_argument);
  Schedule bad;
  bad.phases.push_back({"bad", {{0, 9, 1.0}}, 1});
  EXPECT_THROW(estimate_time(bad, nodes, kUniform), std::invalid_argument);
}

// estimate_time uses the intra or inter costs per flow and the slowest flow's alpha per phase.
TEST(CollectiveEstimate, MixesIntraAndInterCosts) {
  const LinkCosts costs{1, 1, 10, 100};  // alpha_i, beta_i, alpha_e, beta_e
  Schedule schedule;
  // Member 0 sends 2 bytes inside its node and 1 across: egress 2*1 + 1*100; alpha is inter's.
  schedule.phases.push_back({"mixed", {{0, 1, 2.0}, {0, 2, 1.0}}, 3});
  schedule.phases.push_back({"intra", {{1, 0, 4.0}}, 2});
  EXPECT_DOUBLE_EQ(estimate_time(schedule, {0, 0, 1}, costs), 3 * 10 + 102 + 2 * 1 + 4);
}

TEST(CollectiveSelect, TinyMessagesOnManyRanksUseLogarithmicAlgorithms) {
  for (int p : {1000, 1024}) {
    const std::vector<int> nodes = blocked_nodes(8, p / 8);
    for (const LinkCosts& costs : {kUniform, kTwoTier}) {
      // Uniform links: the flat double binary tree (2 ceil(log2 p) steps). Two tiers: hierarchical,
      // whose trees span the nodes (2 ceil(log2 m) slow steps) and whose rings stay on NVLink, as
      // NCCL's tree chains a node's GPUs and builds its trees across nodes.
      EXPECT_EQ(select_algorithm(CollectiveKind::all_reduce, nodes, KiB, costs),
                costs.alpha_inter == costs.alpha_intra ? Algorithm::tree : Algorithm::hierarchical);
      // NCCL broadcasts over rings only; across nodes the per-tier chains have fewer latency terms.
      EXPECT_EQ(select_algorithm(CollectiveKind::broadcast, nodes, KiB, costs), Algorithm::hierarchical);
      EXPECT_EQ(select_algorithm(CollectiveKind::broadcast, own_nodes(p), KiB, costs), Algorithm::ring);
      // All-to-all: hierarchical's two latency terms (one per tier) beat p - 1 pairwise steps.
      EXPECT_EQ(select_algorithm(CollectiveKind::all_to_all, nodes, KiB, costs), Algorithm::hierarchical);
      // A flat group that is too large for direct falls back to pairwise exchange.
      EXPECT_EQ(select_algorithm(CollectiveKind::all_to_all, own_nodes(p), KiB, costs), Algorithm::ring);
    }
  }
}

// Huge buffers over a non-power-of-two group (so Rabenseifner needs its fold, and direct is out
// of range): bandwidth-optimal ring on a flat group, hierarchical across nodes.
TEST(CollectiveSelect, HugeMessagesUseRingOrHierarchical) {
  const double n = 8 * GiB;
  EXPECT_EQ(select_algorithm(CollectiveKind::all_reduce, own_nodes(96), n, kUniform), Algorithm::ring);
  EXPECT_EQ(select_algorithm(CollectiveKind::all_gather, own_nodes(96), n, kUniform), Algorithm::ring);
  EXPECT_EQ(select_algorithm(CollectiveKind::all_to_all, own_nodes(96), n, kUniform), Algorithm::ring);
  const std::vector<int> nodes = blocked_nodes(8, 96);
  for (CollectiveKind kind : kKinds) {
    const Algorithm chosen = select_algorithm(kind, nodes, n, kTwoTier);
    EXPECT_TRUE(chosen == Algorithm::ring || chosen == Algorithm::hierarchical)
        << stratsim::core::collective_kind_name(kind) << ": " << algorithm_name(chosen);
  }
  EXPECT_EQ(select_algorithm(CollectiveKind::all_reduce, nodes, n, kTwoTier), Algorithm::hierarchical);
}

// Power-of-two p on an alpha-beta platform: Rabenseifner has ring's bandwidth term with log2 p
// latency terms, so pure alpha-beta would pick it at every size; NCCL never runs it, so the
// automatic selection does not either (it stays available by name).
TEST(CollectiveSelect, RabenseifnerIsNeverChosenAutomatically) {
  const double n = 8 * GiB;
  EXPECT_LT(closed_form_time(CollectiveKind::all_reduce, Algorithm::recursive_halving_doubling, 1024, n, kAlpha, kBeta),
            closed_form_time(CollectiveKind::all_reduce, Algorithm::ring, 1024, n, kAlpha, kBeta));
  for (CollectiveKind kind : kKinds)
    for (double bytes : kSizes)
      EXPECT_NE(select_algorithm(kind, own_nodes(1024), bytes, kUniform), Algorithm::recursive_halving_doubling);
}

// Across nodes the ring runs a channel per NIC: a ring through one NIC per node (the flat closed
// form at NIC costs) is several times slower. All-gather and reduce-scatter pick it over
// hierarchical, whose stages run one after the other; a 3-node all-reduce still picks the rails'
// trees (the busiest node sends 1.5 n/g through its NIC where the ring sends nearly 2 n/g).
TEST(CollectiveSelect, RingAcrossNodesBeatsOneChannel) {
  for (int m : {2, 3, 4, 12}) {
    const int g = 8, p = g * m;
    const std::vector<int> nodes = blocked_nodes(g, m);
    for (double n : {64 * MiB, 8 * GiB}) {
      SCOPED_TRACE("m=" + std::to_string(m) + " n=" + std::to_string(n));
      const double channels =
          estimate_time(build_schedule(CollectiveKind::all_reduce, Algorithm::ring, nodes, n), nodes, kTwoTier);
      const double one_channel = closed_form_time(CollectiveKind::all_reduce, Algorithm::ring, p, n,
                                                  kTwoTier.alpha_inter, kTwoTier.beta_inter);
      EXPECT_LT(channels, one_channel / 3);
      for (CollectiveKind kind : {CollectiveKind::all_gather, CollectiveKind::reduce_scatter})
        EXPECT_EQ(select_algorithm(kind, nodes, n, kTwoTier), Algorithm::ring);
    }
  }
  EXPECT_EQ(select_algorithm(CollectiveKind::all_reduce, blocked_nodes(8, 3), 8 * GiB, kTwoTier),
            Algorithm::hierarchical);
}

// The candidates NCCL would run for each kind (collective.hpp, select_algorithm).
std::vector<Algorithm> nccl_like(CollectiveKind kind) {
  // NCCL runs trees for all-reduce only; broadcast is ring-based like all-gather.
  if (kind == CollectiveKind::all_reduce) return {Algorithm::ring, Algorithm::tree, Algorithm::hierarchical};
  if (kind == CollectiveKind::all_to_all) return {Algorithm::ring, Algorithm::hierarchical, Algorithm::direct};
  return {Algorithm::ring, Algorithm::hierarchical};
}

// The selector's answer is the argmin of estimate_time over the eligible candidates (ties in the
// documented order), whatever shortcuts it takes: checked by brute force on varied layouts.
TEST(CollectiveSelect, IsArgminOfEstimates) {
  const std::vector<std::vector<int>> layouts = {
      own_nodes(12),        blocked_nodes(4, 3),         interleaved_nodes(4, 5),
      blocked_nodes(8, 9),  {0, 0, 1, 1, 1, 2, 0, 2, 3},  // uneven
      blocked_nodes(2, 40),
  };
  for (const auto& nodes : layouts) {
    const int p = static_cast<int>(nodes.size());
    for (CollectiveKind kind : kKinds) {
      for (double n : kSizes) {
        for (const LinkCosts& costs : {kUniform, kTwoTier}) {
          Algorithm best = Algorithm::ring;
          double best_time = 1e300;
          for (Algorithm a : nccl_like(kind)) {
            if (!implements(a, kind) || (a == Algorithm::direct && p > 64)) continue;
            double t = 0;
            try {
              t = estimate_time(build_schedule(kind, a, nodes, n), nodes, costs);
            } catch (const std::invalid_argument&) {
              continue;  // hierarchical on a flat or uneven group
            }
            if (t < best_time * (1 - 1e-12)) {
              best = a;
              best_time = t;
            }
          }
          EXPECT_EQ(select_algorithm(kind, nodes, n, costs), best)
              << describe(kind, best, p, n) << " costs.beta_inter=" << costs.beta_inter;
        }
      }
    }
  }
}

// A 16384-rank group (2048 nodes of 8) gets a valid answer for every kind and size; its cost is
// measured in benchmarks/, not here.
TEST(CollectiveSelect, LargeGroupsGetAValidChoice) {
  const std::vector<int> nodes = blocked_nodes(8, 2048);
  for (CollectiveKind kind : kKinds)
    for (double n : {KiB, 8 * GiB}) {
      const Algorithm chosen = select_algorithm(kind, nodes, n, kTwoTier);
      EXPECT_TRUE(implements(chosen, kind));
      EXPECT_NE(chosen, Algorithm::direct);
    }
}

// ---------------------------------------------------------------------------------------------
// Folding: a group's schedule simulated on its first members with periodic boundaries.

// Bytes each member sends and receives per phase, split by whether the peer shares its node.
struct MemberTraffic {
  double egress_intra = 0, egress_inter = 0, ingress_intra = 0, ingress_inter = 0;
  bool operator==(const MemberTraffic&) const = default;
};

std::vector<std::vector<MemberTraffic>> traffic(const Schedule& schedule, const std::vector<int>& nodes) {
  std::vector<std::vector<MemberTraffic>> out;
  for (const SchedulePhase& phase : schedule.phases) {
    std::vector<MemberTraffic> members(nodes.size());
    for (const Flow& flow : phase.flows) {
      const bool intra = nodes[flow.src] == nodes[flow.dst];
      (intra ? members[flow.src].egress_intra : members[flow.src].egress_inter) += flow.bytes;
      (intra ? members[flow.dst].ingress_intra : members[flow.dst].ingress_inter) += flow.bytes;
    }
    out.push_back(std::move(members));
  }
  return out;
}

TEST(CollectiveFold, WhichAlgorithmsFold) {
  for (CollectiveKind kind : kKinds) {
    const bool a2a = kind == CollectiveKind::all_to_all;
    EXPECT_EQ(folds(kind, Algorithm::ring), !a2a);
    EXPECT_EQ(folds(kind, Algorithm::hierarchical), !a2a);
    EXPECT_EQ(folds(kind, Algorithm::tree), kind == CollectiveKind::all_reduce);
    EXPECT_EQ(folds(kind, Algorithm::nvls_tree), kind == CollectiveKind::all_reduce);
    EXPECT_EQ(implements(Algorithm::nvls_tree, kind), kind == CollectiveKind::all_reduce);
    EXPECT_FALSE(folds(kind, Algorithm::direct));
    EXPECT_FALSE(folds(kind, Algorithm::recursive_halving_doubling));
  }
}

// Rings and hierarchical rails: every simulated member moves exactly what it moves in the full
// group, phase by phase, over the same kind of link, for the same latency steps. (Broadcast's
// root receives nothing in the full chain; folded, it stands for the first member of the next
// block, so only its ingress differs.)
TEST(CollectiveFold, RingsAndRailsKeepEveryMembersTraffic) {
  struct Shape {
    Algorithm algorithm;
    int g, m, folded_m;
  };
  for (const Shape& shape :
       {Shape{Algorithm::ring, 1, 64, 2}, Shape{Algorithm::ring, 8, 16, 2}, Shape{Algorithm::ring, 4, 6, 3},
        Shape{Algorithm::hierarchical, 8, 16, 2}, Shape{Algorithm::hierarchical, 2, 9, 3},
        Shape{Algorithm::nvls_tree, 8, 16, 2}, Shape{Algorithm::nvls_tree, 4, 6, 3}}) {
    const std::vector<int> full_nodes = blocked_nodes(shape.g, shape.m);
    const std::vector<int> folded_nodes = blocked_nodes(shape.g, shape.folded_m);
    const int p = shape.g * shape.m;
    for (CollectiveKind kind : kKinds) {
      if (!folds(kind, shape.algorithm)) continue;
      SCOPED_TRACE(describe(kind, shape.algorithm, p, MiB) + " g=" + std::to_string(shape.g) + " folded onto " +
                   std::to_string(shape.folded_m) + " nodes");
      const Schedule full = build_schedule(kind, shape.algorithm, full_nodes, MiB);
      const Schedule folded = build_folded_schedule(kind, shape.algorithm, folded_nodes, p, MiB);
      ASSERT_EQ(folded.phases.size(), full.phases.size());
      auto full_traffic = traffic(full, full_nodes);
      const auto folded_traffic = traffic(folded, folded_nodes);
      // Hierarchical all-reduce's rail trees load nodes unevenly; folded, every simulated member
      // carries what the busiest member of the full trees does, phase by phase.
      if (shape.algorithm != Algorithm::ring && kind == CollectiveKind::all_reduce)
        for (auto& members : full_traffic) {
          MemberTraffic busiest;
          for (const MemberTraffic& t : members)
            busiest = {std::max(busiest.egress_intra, t.egress_intra), std::max(busiest.egress_inter, t.egress_inter),
                       std::max(busiest.ingress_intra, t.ingress_intra),
                       std::max(busiest.ingress_inter, t.ingress_inter)};
          std::fill(members.begin(), members.end(), busiest);
        }
      for (std::size_t k = 0; k < full.phases.size(); ++k) {
        EXPECT_EQ(folded.phases[k].latency_steps, full.phases[k].latency_steps);
        for (std::size_t i = 0; i < folded_nodes.size(); ++i) {
          MemberTraffic expected = full_traffic[k][i];
          if (kind == CollectiveKind::broadcast && (i == 0 || static_cast<int>(i) % shape.g == 0) &&
              folded_traffic[k][i] != expected) {
            // The chain's heads: egress must match, ingress is the wrapped hop.
            EXPECT_EQ(folded_traffic[k][i].egress_intra, expected.egress_intra) << "member " << i;
            EXPECT_EQ(folded_traffic[k][i].egress_inter, expected.egress_inter) << "member " << i;
            continue;
          }
          EXPECT_EQ(folded_traffic[k][i], expected) << "phase " << k << " member " << i;
        }
      }
      EXPECT_DOUBLE_EQ(estimate_time(folded, folded_nodes, kTwoTier), estimate_time(full, full_nodes, kTwoTier));
    }
  }
}

// The double binary tree keeps the full depth and each member's one parent and two children
// per tree, so its idle-platform time is the full tree's.
TEST(CollectiveFold, TreeKeepsDepthAndPerMemberLoad) {
  for (int p : {64, 1000, 4096}) {
    for (int folded : {8, 16}) {
      if (p % folded != 0) continue;
      const Schedule full = build_schedule(CollectiveKind::all_reduce, Algorithm::tree, own_nodes(p), MiB);
      const Schedule small =
          build_folded_schedule(CollectiveKind::all_reduce, Algorithm::tree, own_nodes(folded), p, MiB);
      ASSERT_EQ(small.phases.size(), full.phases.size());
      for (std::size_t k = 0; k < full.phases.size(); ++k)
        EXPECT_EQ(small.phases[k].latency_steps, full.phases[k].latency_steps) << "p=" << p;
      EXPECT_DOUBLE_EQ(estimate_time(small, own_nodes(folded), kUniform), estimate_time(full, own_nodes(p), kUniform))
          << "p=" << p << " folded onto " << folded;
    }
  }
}

TEST(CollectiveFold, InvalidFoldsThrow) {
  const std::vector<int> nodes = blocked_nodes(8, 2);
  EXPECT_THROW(build_folded_schedule(CollectiveKind::all_gather, Algorithm::direct, nodes, 64, MiB),
               std::invalid_argument);
  EXPECT_THROW(build_folded_schedule(CollectiveKind::all_to_all, Algorithm::ring, nodes, 64, MiB),
               std::invalid_argument);
  EXPECT_THROW(build_folded_schedule(CollectiveKind::broadcast, Algorithm::tree, nodes, 64, MiB),
               std::invalid_argument);
  EXPECT_THROW(build_folded_schedule(CollectiveKind::all_reduce, Algorithm::ring, nodes, 24, MiB),
               std::invalid_argument);
  EXPECT_THROW(build_folded_schedule(CollectiveKind::all_reduce, Algorithm::ring, nodes, 8, MiB),
               std::invalid_argument);
  // Standing for itself is the plain schedule, whatever the algorithm.
  const Schedule same = build_folded_schedule(CollectiveKind::all_gather, Algorithm::direct, nodes, 16, MiB);
  EXPECT_EQ(traffic(same, nodes),
            traffic(build_schedule(CollectiveKind::all_gather, Algorithm::direct, nodes, MiB), nodes));
}
