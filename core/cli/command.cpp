// The stratsim command's output helpers, shared by every layer's subcommands: files are written
// whole or not at all, so a failure never leaves a partial output behind.
#include "stratsim/cli/command.hpp"

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

void print_error(const std::string& message) {
  const std::string line = "stratsim: error: " + message + "\n";
  std::size_t written = 0;
  while (written < line.size()) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + written, line.size() - written);
    if (n <= 0) break;  // nowhere left to report to
    written += static_cast<std::size_t>(n);
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
