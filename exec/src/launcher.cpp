// Starts, supervises and reaps the rank processes of one local run.
//
// Signals are blocked in the launcher and taken synchronously with sigtimedwait, so SIGCHLD,
// SIGINT and SIGTERM are handled in one loop without async-signal-safety concerns; the ranks get
// the default dispositions back before exec.
#include "stratsim/exec/launcher.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
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

struct Child {
  int rank = 0;
  pid_t pid = -1;
  bool running = true;
  int status = 0;     // wait status once reaped
  bool hung = false;  // still running when the others had failed and the timeout passed
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
[[noreturn]] void exec_rank(const std::vector<std::string>& command, const std::vector<std::string>& env,
                            pid_t launcher) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) ::_exit(127);  // the launcher died before prctl took effect
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  std::vector<char*> argv, envp;
  for (const std::string& arg : command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  for (const std::string& entry : env) envp.push_back(const_cast<char*>(entry.c_str()));
  envp.push_back(nullptr);
  ::execve(argv[0], argv.data(), envp.data());
  std::fprintf(stderr, "stratsim run: cannot start %s: %s\n", argv[0], std::strerror(errno));
  ::_exit(127);
}

std::string describe_exit(const Child& child) {
  const std::string who = fmt::format("rank {} (pid {})", child.rank, child.pid);
  if (child.hung) return who + " hung: still running after the other ranks had failed and the timeout passed; killed";
  if (WIFSIGNALED(child.status))
    return fmt::format("{} was killed by signal {} ({})", who, WTERMSIG(child.status),
                       ::strsignal(WTERMSIG(child.status)));
  return fmt::format("{} exited with status {}", who, WEXITSTATUS(child.status));
}

bool failed(const Child& child) {
  return child.hung || WIFSIGNALED(child.status) || (WIFEXITED(child.status) && WEXITSTATUS(child.status) != 0);
}

class Supervisor {
 public:
  explicit Supervisor(const LaunchOptions& options) : options_(options) {}

  int run() {
    const std::string run_id = options_.run_id.empty() ? fresh_run_id() : options_.run_id;
    std::string rendezvous = options_.rendezvous;
    if (rendezvous.empty()) {
      private_directory_ = make_private_directory();
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
  }

  void start(int rank, const std::string& run_id, const std::string& rendezvous) {
    const std::vector<std::string> env = rank_environment(options_, rank, run_id, rendezvous);
    const pid_t launcher = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
      kill_all(SIGKILL);
      wait_all();
      throw core::InputError(fmt::format("cannot start rank {}: {}", rank, std::strerror(errno)));
    }
    if (pid == 0) exec_rank(options_.command, env, launcher);
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
      if (!deadline && first_failure()) deadline = Clock::now() + options_.timeout + std::chrono::seconds(2);
      if (deadline && Clock::now() > *deadline) {
        for (Child& child : children_) child.hung = child.running;
        kill_all(SIGKILL);
        wait_all();
      }
    }
    return false;
  }

  int running() const {
    int count = 0;
    for (const Child& child : children_) count += child.running ? 1 : 0;
    return count;
  }

  bool first_failure() const {
    for (const Child& child : children_)
      if (!child.running && failed(child)) return true;
    return false;
  }

  void reap() {
    for (Child& child : children_) {
      if (!child.running) continue;
      int status = 0;
      if (::waitpid(child.pid, &status, WNOHANG) == child.pid) {
        child.running = false;
        child.status = status;
        child.ended = Clock::now();
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
    // we killed them, because it vanished; on a loaded box, ASan builds in CI, survivors can take
    // longer than the timeout to notice), else a hung rank (the others failed waiting for it),
    // else the rank that ended first.
    const auto severity = [](const Child& child) { return child.hung ? 1 : WIFSIGNALED(child.status) ? 2 : 0; };
    const Child* culprit = problems.front();
    for (const Child* child : problems)
      if (severity(*child) > severity(*culprit) ||
          (severity(*child) == severity(*culprit) && child->ended < culprit->ended))
        culprit = child;
    bool input_errors = true;
    for (const Child* child : problems) {
      std::fprintf(stderr, "stratsim run: %s\n", describe_exit(*child).c_str());
      input_errors = input_errors && !child->hung && WIFEXITED(child->status) && WEXITSTATUS(child->status) == 2;
    }
    std::fprintf(stderr, "stratsim run: failed: %s\n", describe_exit(*culprit).c_str());
    return input_errors ? 2 : 1;
  }

  const LaunchOptions& options_;
  std::vector<Child> children_;
  std::string private_directory_;
  sigset_t handled_{}, previous_{};
};

}  // namespace

int launch(const LaunchOptions& options) {
  if (options.nproc < 1) throw core::InputError(fmt::format("--nproc {}: expected at least 1", options.nproc));
  if (options.command.empty()) throw core::InputError("no command to launch");
  return Supervisor(options).run();
}

}  // namespace stratsim::exec
