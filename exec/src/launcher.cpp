// Starts, supervises and reaps the rank processes of one local run.
//
// Signals are blocked in the launcher and taken synchronously with sigtimedwait, so SIGCHLD,
// SIGINT and SIGTERM are handled in one loop without async-signal-safety concerns; the ranks get
// the default dispositions back before exec.
#include "stratsim/exec/launcher.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "stratsim/core/errors.hpp"

extern char** environ;

namespace stratsim::exec {
namespace {

using Clock = std::chrono::steady_clock;

// How a rank still running at the end of the grace is read: the launcher cannot see why it did
// not end, so it judges by what it can see.
enum class Leftover {
  none,
  hung,     // stopped (SIGSTOP), or the first failure came after the timeout: the others timed out on it
  waiting,  // the first failure came early, an error of its own: this rank was waiting on it
};

struct Child {
  int rank = 0;
  pid_t pid = -1;
  bool running = true;
  int stopped = 0;  // the signal that stopped it (SIGSTOP, SIGTSTP, ...), as waitpid last reported; 0: running
  int status = 0;   // wait status once reaped
  Leftover leftover = Leftover::none;
  Clock::time_point ended{};
};

std::string fresh_run_id() {
  std::random_device random;
  return fmt::format("run-{}-{:08x}", ::getpid(), random());
}

std::string make_private_directory() {
  std::string pattern = (std::filesystem::temp_directory_path() / "stratsim-rdzv-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr)
    throw core::InputError(fmt::format("cannot create a rendezvous directory: {}", std::strerror(errno)));
  return pattern;
}

// A null-terminated array of C strings pointing into `strings`, which must outlive it.
std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (const std::string& text : strings) pointers.push_back(const_cast<char*>(text.c_str()));
  pointers.push_back(nullptr);
  return pointers;
}

// Removes the private rendezvous directory once the launcher is gone, however it went: a shell
// reading a pipe whose only writer is the launcher. The kernel closes that end when the launcher
// exits or is killed, even by SIGKILL; the read ends, and the shell removes the directory (again
// for a while: the ranks die with the launcher a moment later and may still be writing there).
// A shell, exec'd at once, because the launcher may have threads (CUDA's) and the child of such a
// process may only make async-signal-safe calls.
class DirectoryWatcher {
 public:
  explicit DirectoryWatcher(const std::string& directory) {
    const std::vector<std::string> command = {
        "/bin/sh", "-c",
        "cat >/dev/null; for i in $(seq 100); do rm -rf -- \"$0\"; [ -e \"$0\" ] || exit 0; sleep 0.05; done",
        directory};
    const std::vector<char*> argv = c_strings(command);
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return;  // no watcher: the launcher still cleans up itself
    pid_ = ::fork();
    if (pid_ == 0) watch(fds[0], argv.data());
    ::close(fds[0]);
    if (pid_ < 0) {
      ::close(fds[1]);
      return;
    }
    write_end_ = fds[1];
  }
  ~DirectoryWatcher() {
    if (write_end_ >= 0) ::close(write_end_);
    if (pid_ > 0)
      while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
      }
  }
  DirectoryWatcher(const DirectoryWatcher&) = delete;
  DirectoryWatcher& operator=(const DirectoryWatcher&) = delete;

 private:
  // The pipe on stdin; stdout and stderr to /dev/null and no other descriptor, so it holds none of
  // the caller's pipes (a shell waiting for the launcher's output would wait for it too); and it
  // outlives the terminal's Ctrl-C, which the launcher handles.
  [[noreturn]] static void watch(int read_end, char* const* argv) {
    const int null = ::open("/dev/null", O_RDWR);
    ::dup2(read_end, STDIN_FILENO);  // dup2 clears close-on-exec on the copy
    ::dup2(null, STDOUT_FILENO);
    ::dup2(null, STDERR_FILENO);
    ::close_range(STDERR_FILENO + 1, ~0U, 0);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    for (int signal : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(signal, &ignore, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execv(argv[0], argv);
    ::_exit(127);
  }

  pid_t pid_ = -1;
  int write_end_ = -1;
};

std::vector<std::string> rank_environment(const LaunchOptions& options, int rank, const std::string& run_id,
                                          const std::string& rendezvous) {
  const std::vector<std::pair<std::string, std::string>> ours = {
      {"RANK", std::to_string(rank)},       {"WORLD_SIZE", std::to_string(options.nproc)},
      {"LOCAL_RANK", std::to_string(rank)}, {"LOCAL_WORLD_SIZE", std::to_string(options.nproc)},
      {"STRATSIM_RUN_ID", run_id},          {"STRATSIM_RDZV", rendezvous}};
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text = *entry;
    const std::string key = text.substr(0, text.find('='));
    bool overridden = false;
    for (const auto& [name, value] : ours) overridden = overridden || key == name;
    if (!overridden) env.push_back(text);
  }
  for (const auto& [name, value] : ours) env.push_back(name + "=" + value);
  return env;
}

// In the child between fork and exec: die with the launcher, default signals, then exec.
// In the child between fork and exec: die with the launcher, default signals, then exec. Only
// async-signal-safe calls here (the launcher may have threads: CUDA's, with --backend nccl), so
// argv and envp are built before the fork.
[[noreturn]] void exec_rank(char* const* argv, char* const* envp, pid_t launcher) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) ::_exit(127);  // the launcher died before prctl took effect
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(argv[0], argv, envp);
  constexpr char kMessage[] = "stratsim run: cannot start the rank's program (execve failed)\n";
  [[maybe_unused]] const ssize_t ignored = ::write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
  ::_exit(127);
}

std::string describe_exit(const Child& child, const Child* first_failure) {
  const std::string who = fmt::format("rank {} (pid {})", child.rank, child.pid);
  const std::string first = first_failure ? fmt::format("rank {}", first_failure->rank) : "another rank";
  if (child.leftover == Leftover::hung && child.stopped)
    return fmt::format("{} hung: stopped (SIG{}) while the others waited for it; killed", who,
                       ::sigabbrev_np(child.stopped) ? ::sigabbrev_np(child.stopped) : "?");
  if (child.leftover == Leftover::hung)
    return fmt::format("{} hung: still running {} s after {} had failed, past the timeout; killed", who,
                       kFailureGrace.count(), first);
  if (child.leftover == Leftover::waiting)
    return fmt::format("{} was still running {} s after {} failed; killed", who, kFailureGrace.count(), first);
  if (WIFSIGNALED(child.status))
    return fmt::format("{} was killed by signal {} ({})", who, WTERMSIG(child.status),
                       ::strsignal(WTERMSIG(child.status)));
  return fmt::format("{} exited with status {}", who, WEXITSTATUS(child.status));
}

bool failed(const Child& child) {
  return child.leftover != Leftover::none || WIFSIGNALED(child.status) ||
         (WIFEXITED(child.status) && WEXITSTATUS(child.status) != 0);
}

class Supervisor {
 public:
  explicit Supervisor(const LaunchOptions& options) : options_(options) {}

  int run() {
    const std::string run_id = options_.run_id.empty() ? fresh_run_id() : options_.run_id;
    std::string rendezvous = options_.rendezvous;
    if (rendezvous.empty()) {
      private_directory_ = make_private_directory();
      watcher_ = std::make_unique<DirectoryWatcher>(private_directory_);
      rendezvous = "file:" + private_directory_;
    }
    block_signals();
    bool interrupted = false;
    try {
      for (int rank = 0; rank < options_.nproc; ++rank) start(rank, run_id, rendezvous);
      interrupted = supervise();
    } catch (...) {
      clean_up();
      throw;
    }
    clean_up();
    return report(interrupted);
  }

 private:
  void block_signals() {
    sigemptyset(&handled_);
    sigaddset(&handled_, SIGCHLD);
    sigaddset(&handled_, SIGINT);
    sigaddset(&handled_, SIGTERM);
    ::sigprocmask(SIG_BLOCK, &handled_, &previous_);
  }
  // Signals back as they were and the private rendezvous directory gone, whatever happened.
  void clean_up() {
    ::sigprocmask(SIG_SETMASK, &previous_, nullptr);
    if (!private_directory_.empty()) std::filesystem::remove_all(private_directory_);
    watcher_.reset();
  }

  void start(int rank, const std::string& run_id, const std::string& rendezvous) {
    const std::vector<std::string> env = rank_environment(options_, rank, run_id, rendezvous);
    const std::vector<char*> argv = c_strings(options_.command), envp = c_strings(env);
    const pid_t launcher = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
      kill_all(SIGKILL);
      wait_all();
      throw core::InputError(fmt::format("cannot start rank {}: {}", rank, std::strerror(errno)));
    }
    if (pid == 0) exec_rank(argv.data(), envp.data(), launcher);
    children_.push_back(Child{rank, pid});
  }

  // Returns true when interrupted by SIGINT/SIGTERM.
  bool supervise() {
    std::optional<Clock::time_point> deadline;  // set by the first failure
    while (running() > 0) {
      const timespec tick{0, 50'000'000};
      siginfo_t info{};
      const int signal = ::sigtimedwait(&handled_, &info, &tick);
      if (signal == SIGINT || signal == SIGTERM) {
        stop_all();
        return true;
      }
      reap();
      if (!deadline && first_failure()) deadline = Clock::now() + kFailureGrace;
      // Every other rank done and one stopped: it gets the timeout to be continued (a debugger).
      if (!deadline && only_stopped_left()) deadline = Clock::now() + options_.timeout;
      // A stopped rank cannot end on its own: after a failure, once only such ranks are left, the
      // grace is over.
      if (deadline && (Clock::now() > *deadline || (first_failure() && only_stopped_left()))) {
        judge_leftovers();
        kill_all(SIGKILL);
        wait_all();
      }
    }
    return false;
  }

  // A rank still running is hung when it is stopped, or when the first failure was a rank timing
  // out on a peer (exit status kTimedOutStatus): that peer is the one still running. After a
  // failure of a rank's own (an error, a death), the others were only waiting on it.
  void judge_leftovers() {
    const Child* first = first_failure();
    const bool timed_out = !first || (WIFEXITED(first->status) && WEXITSTATUS(first->status) == kTimedOutStatus);
    for (Child& child : children_)
      if (child.running) child.leftover = child.stopped || timed_out ? Leftover::hung : Leftover::waiting;
  }

  bool only_stopped_left() const {
    for (const Child& child : children_)
      if (child.running && !child.stopped) return false;
    return true;
  }

  int running() const {
    int count = 0;
    for (const Child& child : children_) count += child.running ? 1 : 0;
    return count;
  }

  // The rank that ended first with a failure of its own, or null.
  const Child* first_failure() const {
    const Child* first = nullptr;
    for (const Child& child : children_)
      if (!child.running && child.leftover == Leftover::none && failed(child) && (!first || child.ended < first->ended))
        first = &child;
    return first;
  }

  // Ranks that ended within one tick share its time: their order within it is unknown.
  void reap() {
    const Clock::time_point now = Clock::now();
    for (Child& child : children_) {
      if (!child.running) continue;
      int status = 0;
      while (::waitpid(child.pid, &status, WNOHANG | WUNTRACED | WCONTINUED) == child.pid) {
        if (WIFSTOPPED(status)) {
          child.stopped = WSTOPSIG(status);
        } else if (WIFCONTINUED(status)) {
          child.stopped = 0;
        } else {
          child.running = false;
          child.status = status;
          child.ended = now;
          break;
        }
      }
    }
  }

  void wait_all() {
    for (Child& child : children_) {
      if (!child.running) continue;
      ::waitpid(child.pid, &child.status, 0);
      child.running = false;
      child.ended = Clock::now();
    }
  }

  void kill_all(int signal) {
    for (const Child& child : children_)
      if (child.running) ::kill(child.pid, signal);
  }

  // Ctrl-C: ask politely, then make sure.
  void stop_all() {
    kill_all(SIGTERM);
    const auto grace = Clock::now() + std::chrono::seconds(2);
    while (running() > 0 && Clock::now() < grace) {
      reap();
      ::usleep(20'000);
    }
    kill_all(SIGKILL);
    wait_all();
  }

  int report(bool interrupted) const {
    if (interrupted) {
      std::fprintf(stderr, "stratsim run: interrupted; all %zu ranks stopped\n", children_.size());
      return 130;
    }
    std::vector<const Child*> problems;
    for (const Child& child : children_)
      if (failed(child)) problems.push_back(&child);
    if (problems.empty()) return 0;
    // The culprit: a rank killed by a signal we did not send (the others failed, or waited until
    // we killed them, because it vanished), else a hung rank (the others failed waiting for it),
    // else the rank that failed first; never one that was only waiting on it.
    const auto severity = [](const Child& child) {
      if (child.leftover == Leftover::waiting) return 0;
      if (child.leftover == Leftover::hung) return 2;
      return WIFSIGNALED(child.status) ? 3 : 1;
    };
    const Child* culprit = problems.front();
    for (const Child* child : problems)
      if (severity(*child) > severity(*culprit) ||
          (severity(*child) == severity(*culprit) && child->ended < culprit->ended))
        culprit = child;
    const Child* first = first_failure();
    // Bad input (status 2) only when every rank that ended on its own rejected it.
    bool input_errors = true;
    for (const Child* child : problems) {
      std::fprintf(stderr, "stratsim run: %s\n", describe_exit(*child, first).c_str());
      if (child->leftover == Leftover::waiting) continue;
      input_errors = input_errors && child->leftover == Leftover::none && WIFEXITED(child->status) &&
                     WEXITSTATUS(child->status) == 2;
    }
    std::fprintf(stderr, "stratsim run: failed: %s\n", describe_exit(*culprit, first).c_str());
    return input_errors ? 2 : 1;
  }

  const LaunchOptions& options_;
  std::vector<Child> children_;
  std::string private_directory_;
  std::unique_ptr<DirectoryWatcher> watcher_;
  sigset_t handled_{}, previous_{};
};

}  // namespace

int launch(const LaunchOptions& options) {
  if (options.nproc < 1 || options.nproc > kMaxLocalRanks)
    throw core::InputError(
        fmt::format("{} ranks: one launcher starts 1 to {} rank processes on one host (start ranks on several hosts "
                    "with torchrun or srun)",
                    options.nproc, kMaxLocalRanks));
  if (options.command.empty()) throw core::InputError("no command to launch");
  return Supervisor(options).run();
}

}  // namespace stratsim::exec
