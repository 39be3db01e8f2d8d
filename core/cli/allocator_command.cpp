// stratsim allocator HISTORY: a recorded history of PyTorch's CUDA caching allocator (every alloc
// and free of a run, as `benchmarks/accuracy/gpu/llama_step.py --memory-trace` or
// `tools/allocator_history.py` write it) replayed through the allocator model under the default
// segments and under expandable segments: what the run reserved, and what it would reserve with
// the other setting (stratsim/core/caching_allocator.hpp).
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "stratsim/cli/command.hpp"
#include "stratsim/core/caching_allocator.hpp"
#include "stratsim/core/errors.hpp"

namespace stratsim::cli {
namespace {

struct AllocatorArgs {
  std::string history;
  bool json = false;
  std::string output;
};

double gib(std::int64_t bytes) { return static_cast<double>(bytes) / 1073741824.0; }

std::string text_report(const std::string& path, std::size_t allocations, const core::AllocatorHistory& recorded,
                        const core::AllocatorStats& standard, const core::AllocatorStats& expandable) {
  const std::string origin = recorded.source.empty() ? fmt::format("recorded with expandable_segments {}",
                                                                   recorded.recorded_expandable ? "on" : "off")
                                                     : fmt::format("written by {}", recorded.source);
  std::string out = fmt::format("allocator history: {} ({} allocations, {})\n\n", path, allocations, origin);
  out += fmt::format("  {:<22} {:>15} {:>15} {:>10} {:>10}\n", "", "allocated peak", "reserved peak", "reserved/",
                     "segments");
  out += fmt::format("  {:<22} {:>15} {:>15} {:>10}\n", "", "", "", "allocated");
  const auto row = [&](const std::string& name, std::int64_t allocated, std::int64_t reserved,
                       const std::string& segs) {
    std::string line =
        fmt::format("  {:<22} {:>11.2f} GiB {:>11.2f} GiB {:>10.3f} {:>10}", name, gib(allocated), gib(reserved),
                    allocated > 0 ? static_cast<double>(reserved) / static_cast<double>(allocated) : 0.0, segs);
    line.erase(line.find_last_not_of(' ') + 1);
    out += line + "\n";
  };
  if (recorded.recorded_allocated_peak && recorded.recorded_reserved_peak)
    row("recorded (PyTorch)", *recorded.recorded_allocated_peak, *recorded.recorded_reserved_peak, "");
  row("default segments", standard.peak_allocated, standard.peak_reserved, std::to_string(standard.segments));
  row("expandable segments", expandable.peak_allocated, expandable.peak_reserved,
      std::to_string(expandable.segments) + " maps");
  // A recording keeps the driver's segment addresses for its own setting; a prediction has none.
  out += recorded.source.empty()
             ? "\nThe recorded setting replays at the driver's own segment addresses; the other without them (each "
               "new\nsegment above the last)."
             : "\nEach new segment lies above the last.";
  out += fmt::format(" PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True {} the reserved peak by {:.2f} GiB.\n",
                     expandable.peak_reserved <= standard.peak_reserved ? "lowers" : "raises",
                     std::abs(gib(standard.peak_reserved) - gib(expandable.peak_reserved)));
  return out;
}

nlohmann::json stats_json(const core::AllocatorStats& stats) {
  return {{"allocated_peak_bytes", stats.peak_allocated},
          {"reserved_peak_bytes", stats.peak_reserved},
          {"segments", stats.segments}};
}

int run_allocator(const AllocatorArgs& args) {
  const core::AllocatorHistory history = core::read_allocator_trace(args.history);
  // The setting the history was recorded under keeps the driver's addresses (ties between
  // equal-sized free blocks fall as they fell); the other has no addresses to keep.
  const auto replay = [&](bool expandable) {
    return core::replay_allocator_trace(history.events, {.expandable_segments = expandable},
                                        expandable == history.recorded_expandable);
  };
  const core::AllocatorStats standard = replay(false), expandable = replay(true);
  const auto allocations =
      static_cast<std::size_t>(std::count_if(history.events.begin(), history.events.end(), [](const auto& e) {
        return e.action == core::AllocatorEvent::Action::alloc;
      }));
  std::string report;
  if (args.json) {
    nlohmann::json out = {{"history", args.history},
                          {"allocations", allocations},
                          {"recorded_expandable_segments", history.recorded_expandable},
                          {"default_segments", stats_json(standard)},
                          {"expandable_segments", stats_json(expandable)}};
    if (history.recorded_allocated_peak && history.recorded_reserved_peak)
      out["recorded"] = {{"allocated_peak_bytes", *history.recorded_allocated_peak},
                         {"reserved_peak_bytes", *history.recorded_reserved_peak}};
    report = out.dump(2) + "\n";
  } else {
    report = text_report(args.history, allocations, history, standard, expandable);
  }
  write_or_print(args.output, report);
  return 0;
}

const Register allocator_registration("allocator", [](CLI::App& app) {
  auto args = std::make_shared<AllocatorArgs>();
  CLI::App* cmd = app.add_subcommand(
      "allocator",
      "Replay a recorded history of PyTorch's CUDA caching allocator: the reserved peak with default and with "
      "expandable segments");
  cmd->add_option("history", args->history,
                  "The history: JSON (.json or .json.gz) with \"trace\": [[action, address, size, stream], ...], as "
                  "llama_step.py --memory-trace or tools/allocator_history.py write it")
      ->required();
  cmd->add_flag("--json", args->json, "Write the result as JSON");
  cmd->add_option("-o,--output", args->output, "Write to this file instead of standard output");
  return Subcommand{cmd, [args] { return run_allocator(*args); }};
});

}  // namespace
}  // namespace stratsim::cli
