// simulate(): runs the SimGrid engine in a child process and reads its result back.
//
// SimGrid 3.32 allows one engine per process and keeps global state after it ends, so a library
// call that may be repeated (tests, benchmarks, plan searches) forks, simulates in the child and
// pipes a compact binary result to the parent. A SimGrid abort in the child (it calls xbt_die on
// some platform errors) becomes an error here instead of killing the caller.
#include "stratsim/sim/simulator.hpp"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "engine.hpp"
#include "stratsim/core/errors.hpp"

namespace stratsim::sim {
namespace {

// First byte on the pipe: what follows.
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

[[noreturn]] void child_main(int fd, const core::Program& program, const PlatformSpec& platform,
                             const SimOptions& options) {
  int status = 0;
  try {
    write_all(fd, kResult + detail::serialize(detail::run_engine(program, platform, options)));
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
    if (algorithm == Algorithm::nvls &&
        (platform.cost.network.nvls_bandwidth_fraction <= 0 ||
         (platform.kind != PlatformKind::node && platform.kind != PlatformKind::cluster)))
      throw core::InputError(
          "algorithm nvls: this platform's switches cannot reduce (it needs a GPU preset whose cost model has "
          "network.nvls, such as h100)");
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
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child < 0) throw std::runtime_error("simulate: cannot fork the simulation process");
  if (child == 0) {
    // Die with the caller: a `simulate` ended by a signal must not leave SimGrid running (the
    // check after prctl covers a caller that died before it took effect).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    ::close(fds[0]);
    child_main(fds[1], program, platform, options);
  }
  ::close(fds[1]);
  const std::string bytes = read_all(fds[0]);
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (bytes.empty()) {
    if (WIFSIGNALED(status))
      throw std::runtime_error(fmt::format("the simulation process died ({})", strsignal(WTERMSIG(status))));
    throw core::InputError(
        fmt::format("the simulation process stopped without a result (exit status {}); SimGrid rejected the platform?",
                    WIFEXITED(status) ? WEXITSTATUS(status) : -1));
  }
  const std::string payload = bytes.substr(1);
  if (bytes[0] == kInputError) throw core::InputError(payload);
  if (bytes[0] == kFailure) throw std::runtime_error("simulation failed: " + payload);
  SimResult result = detail::deserialize(payload);
  result.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  return result;
}

}  // namespace stratsim::sim
