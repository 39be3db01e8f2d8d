// The simulator: runs a program on a platform with SimGrid and records when every op ran.
//
// Usage (what `stratsim simulate --model zoo:llama2-7b --plan builtin:fsdp --platform h100` does):
//   const core::Model model = core::load_model("zoo:llama2-7b");         // core/model_io.hpp
//   const core::Plan plan = core::load_plan("builtin:fsdp");             // core/plan.hpp
//   const core::PlanResult planned = core::plan_training(model, plan);   // core/planner.hpp
//   const SimResult result = simulate(planned.program, parse_platform("h100"));  // platform.hpp
//   std::cout << core::text_report(planned.program, result,              // core/run_analysis.hpp
//                                  core::analyse(planned.program, result, core::workload_of(model, plan)));
//
// Each simulated rank runs its program's streams as concurrent SimGrid actors; an op starts when it
// is next on its stream and its cross-stream dependencies are done. A collective instance starts
// only when every member has issued it (NCCL semantics), then runs its algorithm's schedule as
// SimGrid flows that contend with every other flow in flight.
//
// Rank symmetry: a program is SPMD, so on identical devices every rank issues the same ops at the
// same times. In representative mode one simulated rank stands for all ranks: it runs the compute
// once, and each collective launches every group instance (all their flows, so contention between
// groups is real) and waits for the slowest. Full mode simulates every rank (stragglers, per-rank
// skew) and is exact; tests check both agree on symmetric inputs.
//
// Folding: on a generated cluster, representative mode also exploits the symmetry between nodes.
// It simulates K of the job's N nodes with periodic boundaries (rank r stands for r mod K*gpus);
// each group instance folds onto the simulated ranks its members map to, and its rings close over
// them while moving the full group's chunks for the full latency steps. Every simulated link then
// carries the images of the flows it carries in the full job, so the timings are the full
// simulation's (tests compare both) at a cost that no longer grows with N. K is the smallest
// divisor of N spanning two leaf switches for which every group folds periodically and every
// collective on a folded group runs a ring, hierarchical or tree all-reduce; otherwise the run is
// unfolded and SimResult::fold_note says why. SimOptions::fold = false turns it off.
//
// The result is a core::RunResult, so core's analysis, reports and timelines (run_analysis.hpp,
// trace.hpp) serve it as they serve measured runs; what only a simulation has stays typed here and
// is also said in the result's notes and extra, which those reports print.
//
// SimGrid allows one engine per process, so simulate() runs the engine in a forked child and
// reads the result back; it can be called any number of times.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "stratsim/core/program.hpp"
#include "stratsim/core/run_result.hpp"
#include "stratsim/sim/collective.hpp"
#include "stratsim/sim/device.hpp"
#include "stratsim/sim/platform.hpp"

namespace stratsim::sim {

enum class RankMode { automatic, representative, full };

std::string_view rank_mode_name(RankMode mode);  // "automatic", "representative", "full"

struct SimOptions {
  RankMode mode = RankMode::automatic;  // automatic: representative unless stragglers are given
  std::map<core::CollectiveKind, Algorithm> algorithms;  // overrides of the automatic selection
  std::map<int, double> stragglers;  // rank -> compute slowdown factor (>= 1); forces full mode
  bool progress = false;             // draw a progress bar on stderr
  bool fold = true;                  // representative mode: fold the network by node symmetry (see below)
};

// The run's records are core's (run_result.hpp); CollectiveRun::algorithm holds algorithm_name().
using OpTiming = core::OpTiming;
using CollectiveRun = core::CollectiveRun;
using LinkLoad = core::LinkLoad;

// RunResult with source "simulation", mode rank_mode_name(rank_mode), `recorded` = the simulated
// ranks (each with the ranks it stands for), platform = describe_platform(), and wall_seconds =
// the host time simulate() took. mode_notes say how the network was folded (or why not), notes
// the SimGrid flow count, and extra holds folded_nodes, total_nodes and fold_note (when set).
struct SimResult : core::RunResult {
  RankMode rank_mode = RankMode::representative;
  std::int64_t flows = 0;  // SimGrid comms started
  int folded_nodes = 0;    // nodes simulated when the network was folded; 0: not folded
  int total_nodes = 0;     // nodes the job spans (cluster platforms)
  std::string fold_note;   // why a cluster run was not folded, if it was not
};

// Throws core::InputError for impossible mappings (more ranks than devices) and bad platforms.
SimResult simulate(const core::Program& program, const PlatformSpec& platform, const SimOptions& options = {});

}  // namespace stratsim::sim
