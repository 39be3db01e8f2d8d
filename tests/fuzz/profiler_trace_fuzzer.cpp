// PyTorch profiler traces (core/include/stratsim/core/profiler_trace.hpp), gzipped or not: what
// reads is matched against a 2-rank DDP simulation's collectives (op_matching.hpp) and reported
// as text and JSON, and every compared collective must come out matched once or listed once.
#include <cstddef>
#include <cstdint>
#include <set>
#include <tuple>

#include "fuzz_support.hpp"
#include "stratsim/core/op_matching.hpp"
#include "stratsim/core/profiler_trace.hpp"
#include "stratsim/core/timeline.hpp"
#include "stratsim/core/trace_timeline.hpp"

namespace {

using namespace stratsim;

// small_ddp_program() with every op of 1 us on both ranks.
const core::CollectiveSide& predicted() {
  static const core::CollectiveSide side = [] {
    core::Timeline timeline;
    timeline.program = fuzz::small_ddp_program();
    timeline.result.world_size = 2;
    timeline.result.recorded = {{0}, {1}};
    timeline.result.timings.assign(2, std::vector<core::OpTiming>(timeline.program.ops.size()));
    for (auto& rank : timeline.result.timings)
      for (std::size_t i = 0; i < rank.size(); ++i) rank[i] = {i * 1e-6, i * 1e-6, (i + 1) * 1e-6};
    return core::timeline_side(timeline, "sim.json", {0, 1});
  }();
  return side;
}

void check_accounted(const core::OpComparison& c) {
  std::set<std::tuple<bool, int, int>> seen;
  int predicted_unmatched = 0;
  for (const core::MatchedCollective& m : c.matched) {
    fuzz::require(seen.insert({true, m.rank, m.predicted}).second, "a predicted collective matched twice");
    fuzz::require(seen.insert({false, m.rank, m.measured}).second, "a measured collective matched twice");
  }
  for (const core::UnmatchedCollective& u : c.unmatched) {
    fuzz::require(seen.insert({u.predicted_side, u.rank, u.index}).second, "a collective listed twice: " + u.reason);
    predicted_unmatched += u.predicted_side;
  }
  fuzz::require(static_cast<int>(c.matched.size()) + predicted_unmatched == c.predicted_compared,
                "predicted collectives neither matched nor listed");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  core::ProfilerTrace trace;
  const bool read = fuzz::accepted("fuzz.json", [&] {
    const nlohmann::json document =
        core::parse_document(core::maybe_gunzip(fuzz::text_of(data, size), "fuzz.json"), "fuzz.json", false);
    std::vector<core::RankTrace> ranks;
    ranks.push_back(core::rank_trace_from_json(document, "fuzz.json"));
    trace = core::assemble_profiler_trace(std::move(ranks));
  });
  if (!read) return 0;
  for (const core::TraceCollective& c : trace.ranks[0].collectives) {
    fuzz::require(c.start <= c.end, "a collective ends before it starts");
    fuzz::require(c.stream >= 0 && c.stream < static_cast<int>(trace.ranks[0].streams.size()), "a stream out of range");
    fuzz::require(c.bytes >= -1, "negative bytes");
  }
  const core::CollectiveSide measured = core::trace_side(trace, "fuzz.json");
  const core::OpComparison comparison = core::match_collectives(predicted(), measured);
  check_accounted(comparison);
  (void)core::op_comparison_text(comparison, predicted(), measured, 15);
  (void)core::op_comparison_json(comparison, predicted(), measured).dump();
  // and the trace as a timeline (what the viewer draws), read back through the timeline format
  const core::TraceTimeline timeline = core::trace_timeline(trace);
  (void)core::timeline_from_json(core::timeline_json(timeline.timeline.program, timeline.timeline.result), "t.json");
  // the trace as the prediction, against itself
  (void)core::match_collectives(measured, measured);
  return 0;
}
