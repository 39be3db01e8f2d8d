// The stratsim command's helpers shared by every layer's subcommands: option validators, the
// one-line error, and a run's outputs (written through output_files.hpp, whole or not at all).
#include "stratsim/cli/command.hpp"

#include <charconv>
#include <cmath>
#include <iostream>

#include <unistd.h>

#include <fmt/format.h>

#include "stratsim/core/errors.hpp"
#include "stratsim/core/report.hpp"
#include "stratsim/core/timeline.hpp"
#include "stratsim/core/trace.hpp"

namespace stratsim::cli {

CLI::Validator finite_at_least(double low, bool strictly) {
  return CLI::Validator(
      [low, strictly](std::string& text) -> std::string {
        double value = 0;
        const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
        const bool ok = error == std::errc() && end == text.data() + text.size() && std::isfinite(value) &&
                        (strictly ? value > low : value >= low);
        return ok ? "" : fmt::format("expected a finite number {} {}, got {}", strictly ? ">" : ">=", low, text);
      },
      strictly ? fmt::format("NUMBER > {}", low) : fmt::format("NUMBER >= {}", low));
}

// One line of readable text whatever the input held: control characters and bytes outside ASCII
// escaped (a raw 0xFF or a newline from a YAML key would otherwise break the line or the
// terminal), and a huge message (a 1 MB bad string) cut short.
std::string one_line(const std::string& message) {
  constexpr std::size_t kMost = 1000;
  std::string out;
  for (const char c : message) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte == '\n') out += "\\n";
    else if (byte < 0x20 || byte >= 0x7f) out += fmt::format("\\x{:02X}", byte);
    else out += c;
    if (out.size() > kMost) return out.substr(0, kMost) + "...";
  }
  return out;
}

void print_error(const std::string& message) {
  const std::string line = "stratsim: error: " + one_line(message) + "\n";
  std::size_t written = 0;
  while (written < line.size()) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + written, line.size() - written);
    if (n <= 0) break;  // nowhere left to report to
    written += static_cast<std::size_t>(n);
  }
}

void check_outputs_writable(const RunOutputs& outputs) {
  check_writable({outputs.output, outputs.trace, outputs.timeline});
}

void write_run_outputs(const RunOutputs& outputs, const core::Program& program, const core::RunResult& result,
                       const core::Workload& workload) {
  const core::Analysis analysis = core::analyse(program, result, workload);
  write_run_outputs(outputs, program, result,
                    outputs.json ? core::json_report(program, result, analysis).dump(2) + "\n"
                                 : core::text_report(program, result, analysis),
                    workload);
}

void write_run_outputs(const RunOutputs& outputs, const core::Program& program, const core::RunResult& result,
                       const std::string& report, const core::Workload& workload) {
  std::vector<std::pair<std::string, std::string>> files;
  if (!outputs.trace.empty()) files.emplace_back(outputs.trace, core::chrome_trace(program, result));
  if (!outputs.timeline.empty())
    files.emplace_back(outputs.timeline, core::timeline_json(program, result, workload).dump() + "\n");
  if (!outputs.output.empty()) files.emplace_back(outputs.output, report);
  write_all_or_nothing(files);
  if (outputs.output.empty()) std::cout << report << std::flush;
}

}  // namespace stratsim::cli
