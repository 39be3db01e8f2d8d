// Recursive halving / doubling (MPICH): pairwise exchanges at distances 1, 2, 4, ..., so every
// collective takes log2 p latency steps, with ring's bandwidth term for a power of two
// (Rabenseifner all-reduce: 2 log2 p alpha + 2(p-1)/p n beta). Other group sizes fold their
// extra members into a power-of-two core first and serve them last, at one more step and one more
// buffer each way. Broadcast is van de Geijn's (binomial scatter, then recursive-doubling
// all-gather); all-to-all is Bruck's (ceil(log2 p) steps of about n/2 each), which trades bandwidth
// for latency. Available by name only: NCCL never runs these (see selection.cpp).

#include "common.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>

namespace stratsim::sim::collectives {

using core::CollectiveKind;

namespace {

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
    if (to_core) add_flow(phase, core.q + j, j, bytes);
    else add_flow(phase, j, core.q + j, bytes);
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

// sum_{k=1..L} ceil(p / 2^k): blocks the largest class sends over the halving (or doubling) steps
// of the p-block reduce-scatter (all-gather) core; equals q - 1 when p = q.
double halving_blocks(const Core& core) {
  double blocks = 0;
  for (int k = 0; k < core.levels; ++k) blocks += core.q / (2 << k) + (core.r + (2 << k) - 1) / (2 << k);
  return blocks;
}

}  // namespace

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
    case CollectiveKind::scatter:
      fail("a scatter runs direct only (implements() refuses the rest)");
  }
  return schedule;
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
    case CollectiveKind::scatter:
      fail("a scatter runs direct only (implements() refuses the rest)");
  }
  return 0;
}

}  // namespace stratsim::sim::collectives
