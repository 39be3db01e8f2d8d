// The stratsim command's output helpers, shared by every layer's subcommands: files are written
// whole or not at all, so a failure never leaves a partial output behind.
#include "stratsim/cli/command.hpp"

#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
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
  for (const std::string& path : {outputs.output, outputs.trace, outputs.timeline}) {
    if (path.empty()) continue;
    std::error_code error;
    const auto status = std::filesystem::status(path, error);
    if (!error && std::filesystem::is_directory(status))
      throw core::InputError(fmt::format("{}: cannot write file (it is a directory)", path));
    if (!error && std::filesystem::exists(status)) {
      if (::access(path.c_str(), W_OK) != 0) throw core::InputError(fmt::format("{}: cannot write file", path));
      continue;
    }
    // A new file: its directory must exist and take new files (the temporary beside it, then the rename).
    std::filesystem::path directory = std::filesystem::path(path).parent_path();
    if (directory.empty()) directory = ".";
    if (!std::filesystem::is_directory(directory, error))
      throw core::InputError(fmt::format("{}: cannot write file (no directory {})", path, directory.string()));
    if (::access(directory.c_str(), W_OK | X_OK) != 0)
      throw core::InputError(
          fmt::format("{}: cannot write file (directory {} is not writable)", path, directory.string()));
  }
}

void write_atomically(const std::string& path, const std::string& text) {
  using core::InputError;
  std::error_code error;
  // A device, pipe or socket (-o /dev/null, -o /dev/stdout, a FIFO) is written in place: renaming a
  // file over it would replace the device itself (as root, /dev/null becomes a regular file).
  const auto status = std::filesystem::status(path, error);
  if (!error && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    std::ofstream out(path, std::ios::binary);
    if (!out || !(out << text) || !out.flush()) throw InputError(fmt::format("{}: cannot write file", path));
    return;
  }
  // Beside the target (same file system, so the rename is atomic), named per process so that
  // concurrent runs writing the same output never share a temporary file.
  const std::string temporary = fmt::format("{}.tmp.{}", path, ::getpid());
  {
    std::ofstream out(temporary, std::ios::binary);
    if (!out) throw InputError(fmt::format("{}: cannot write file", path));
    out << text;
    if (!out.flush()) throw InputError(fmt::format("{}: cannot write file", path));
  }
  std::filesystem::rename(temporary, path, error);
  if (error) {
    std::filesystem::remove(temporary, error);
    throw InputError(fmt::format("{}: cannot write file", path));
  }
}

void write_all_or_nothing(const std::vector<std::pair<std::string, std::string>>& files) {
  std::vector<std::string> written;
  try {
    for (const auto& [path, text] : files) {
      write_atomically(path, text);
      written.push_back(path);
    }
  } catch (const core::InputError&) {
    // Only files this run created go; a device written in place (/dev/null) stays.
    std::error_code error;
    for (const std::string& path : written)
      if (std::filesystem::is_regular_file(path, error)) std::filesystem::remove(path, error);
    throw;
  }
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
