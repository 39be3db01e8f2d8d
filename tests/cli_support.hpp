// Runs the real stratsim binary (path in STRATSIM_BINARY) for the CLI tests of every layer.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace stratsim::test {

struct CliRun {
  int code = 0;
  std::string out;  // stdout, plus stderr unless stdout_only
};

// Runs a shell command line and collects what it prints (its exit status, or -1 for a signal).
inline CliRun run_shell(const std::string& command) {
  CliRun result;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return {-1, "popen failed"};
  std::array<char, 4096> buffer{};
  while (std::size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) result.out.append(buffer.data(), n);
  const int status = pclose(pipe);
  result.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// stderr is merged unless `stdout_only` (sanitizer builds warn on stderr about SimGrid's stack
// switching, which is not the tool's output).
inline CliRun run_cli(const std::string& args, bool stdout_only = false) {
  return run_shell(std::string(STRATSIM_BINARY) + " " + args + (stdout_only ? " 2>/dev/null" : " 2>&1"));
}

// A path in the temporary directory unique to this test process.
inline std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("stratsim_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace stratsim::test
