// simulate(): runs the SimGrid engine in a child process and reads its result back.
//
// SimGrid 3.32 allows one engine per process and keeps global state after it ends, so a library
// call that may be repeated (tests, benchmarks, plan searches) forks, simulates in the child and
// pipes a compact binary result to the parent. A SimGrid abort in the child (it calls xbt_die on
// some platform errors) becomes an error here instead of killing the caller.
#include "stratsim/sim/simulator.hpp"

#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "engine.hpp"
#include "stratsim/core/errors.hpp"

namespace stratsim::sim {
namespace {

// On the pipe: an optional kPlatformBuilt byte, then one of the others and what follows it.
constexpr char kPlatformBuilt = 'P';
constexpr char kResult = 'R';
constexpr char kInputError = 'E';
constexpr char kFailure = 'F';

void write_all(int fd, const std::string& bytes) {
  std::size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // the parent is gone; nothing to report to
    }
    written += static_cast<std::size_t>(n);
  }
}

std::string read_all(int fd) {
  std::string bytes;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (n == 0) break;
    bytes.append(buffer, static_cast<std::size_t>(n));
  }
  return bytes;
}

[[noreturn]] void child_main(int fd, int log_fd, const core::Program& program, const PlatformSpec& platform,
                             const SimOptions& options) {
  // A host application's crash handlers (a fuzzer's, a crash reporter's) are not ours to run
  // here: SimGrid's aborts end this process with their signal, which the parent reports.
  for (const int signal : {SIGABRT, SIGSEGV, SIGBUS, SIGILL, SIGFPE}) std::signal(signal, SIG_DFL);
  int status = 0;
  try {
    // While SimGrid loads the platform its stderr goes to the log too: an xbt_die prints its
    // backtrace there, past the log appender. The simulation's progress bar needs it back.
    const int saved_stderr = log_fd >= 0 ? ::dup(STDERR_FILENO) : -1;
    if (saved_stderr >= 0) ::dup2(log_fd, STDERR_FILENO);
    detail::EngineHooks hooks;
    hooks.platform_built = [fd, saved_stderr] {
      if (saved_stderr >= 0) ::dup2(saved_stderr, STDERR_FILENO);
      write_all(fd, std::string(1, kPlatformBuilt));
    };
    hooks.log_fd = log_fd;
    write_all(fd, kResult + detail::serialize(detail::run_engine(program, platform, options, hooks)));
  } catch (const core::InputError& error) {
    write_all(fd, kInputError + std::string(error.what()));
    status = 2;
  } catch (const std::exception& error) {
    write_all(fd, kFailure + std::string(error.what()));
    status = 1;
  }
  ::close(fd);
  std::fflush(stderr);
  ::_exit(status);  // no atexit handlers: SimGrid's would run twice (once per process)
}

void validate(const core::Program& program, const PlatformSpec& platform, const SimOptions& options) {
  // An XML platform's device count is known only once SimGrid has loaded it (run_engine checks).
  if (platform.kind != PlatformKind::xml)
    detail::require_devices(platform, platform.device_count(), program.world_size);
  for (const auto& [rank, factor] : options.stragglers) {
    if (rank < 0 || rank >= program.world_size)
      throw core::InputError(
          fmt::format("straggler rank {} is outside the world of {} ranks", rank, program.world_size));
    if (!(factor >= 1.0))
      throw core::InputError(fmt::format("straggler factor {} for rank {} must be >= 1", factor, rank));
  }
  // NVLS needs an NVSwitch that reduces: a generated GPU node whose cost model has network.nvls.
  for (const auto& [kind, algorithm] : options.algorithms)
    if ((algorithm == Algorithm::nvls || algorithm == Algorithm::nvls_tree) &&
        (platform.cost.network.nvls_bandwidth_fraction <= 0 ||
         (platform.kind != PlatformKind::node && platform.kind != PlatformKind::cluster)))
      throw core::InputError(
          fmt::format("algorithm {}: this platform's switches cannot reduce (it needs a GPU preset whose cost model "
                      "has network.nvls, such as h100)",
                      algorithm_name(algorithm)));
}

// The last message SimGrid logged (its critical messages: the reason of an xbt_assert or
// xbt_die; the backtrace it prints after it is skipped), or "" when it logged nothing.
std::string last_log_line(int log_fd) {
  std::string text;
  char buffer[4096];
  for (off_t offset = 0;;) {
    const ssize_t n = ::pread(log_fd, buffer, sizeof buffer, offset);
    if (n <= 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
    offset += n;
    if (text.size() > (1 << 20)) text.erase(0, text.size() - 4096);  // only the end matters
  }
  std::string message;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    if (!line.empty() && line.front() != ' ' && !line.starts_with("Backtrace")) message = line;
    start = end + 1;
  }
  return message;
}

// Why the simulation process ended without a result. SimGrid aborts on some XML it cannot load
// (an xbt_assert in its parser callbacks), and the file the user gave is then the input at fault:
// an InputError naming it, with SimGrid's own reason. A death after the platform was built is
// ours (exit 1).
std::exception_ptr died(int status, const PlatformSpec& platform, bool platform_built, const std::string& log) {
  std::string how = WIFSIGNALED(status) ? fmt::format("it died: {}", strsignal(WTERMSIG(status)))
                                        : fmt::format("exit status {}", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  if (!log.empty()) how = fmt::format("{} ({})", log, how);
  if (!platform_built && platform.kind == PlatformKind::xml)
    return std::make_exception_ptr(
        core::InputError(fmt::format("{}: SimGrid could not load the platform: {}", platform.xml_file, how)));
  return std::make_exception_ptr(
      std::runtime_error(fmt::format("the simulation process stopped without a result: {}", how)));
}

}  // namespace

std::string_view rank_mode_name(RankMode mode) {
  switch (mode) {
    case RankMode::automatic:
      return "automatic";
    case RankMode::representative:
      return "representative";
    case RankMode::full:
      return "full";
  }
  return "?";
}

SimResult simulate(const core::Program& program, const PlatformSpec& platform, const SimOptions& options) {
  validate(program, platform, options);
  if (options.mode == RankMode::representative && !options.stragglers.empty())
    throw core::InputError("stragglers need full rank mode (every rank simulated)");
  const auto begin = std::chrono::steady_clock::now();
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("simulate: cannot create a pipe");
  // SimGrid's log, read if the process dies: its last words go into the one error line instead of
  // a second line on the terminal.
  const int log_fd = ::memfd_create("stratsim-simgrid-log", MFD_CLOEXEC);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child < 0) {
    for (const int fd : {fds[0], fds[1], log_fd})
      if (fd >= 0) ::close(fd);
    throw std::runtime_error("simulate: cannot fork the simulation process");
  }
  if (child == 0) {
    // Die with the caller: a `simulate` ended by a signal must not leave SimGrid running (the
    // check after prctl covers a caller that died before it took effect).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    ::close(fds[0]);
    child_main(fds[1], log_fd, program, platform, options);
  }
  ::close(fds[1]);
  std::string bytes = read_all(fds[0]);
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  const bool platform_built = !bytes.empty() && bytes[0] == kPlatformBuilt;
  if (platform_built) bytes.erase(0, 1);
  const std::string log = log_fd >= 0 && bytes.empty() ? last_log_line(log_fd) : "";  // read only when it died
  if (log_fd >= 0) ::close(log_fd);
  if (bytes.empty()) std::rethrow_exception(died(status, platform, platform_built, log));
  const std::string payload = bytes.substr(1);
  if (bytes[0] == kInputError) throw core::InputError(payload);
  if (bytes[0] == kFailure) throw std::runtime_error("simulation failed: " + payload);
  SimResult result = detail::deserialize(payload);
  result.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  return result;
}

}  // namespace stratsim::sim
