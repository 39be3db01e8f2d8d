// Processes started and watched by the real-execution tests: a child with its output in files,
// the ranks a launcher started, when each ended, and that none is left behind.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "cli_support.hpp"

namespace stratsim::test::processes {

using Clock = std::chrono::steady_clock;

// A process started with fork/exec: its stdout and stderr go to files so the test can read them
// after it exits; `env` entries are added to the environment.
struct Process {
  pid_t pid = -1;
  std::string out_path, err_path;

  static Process start(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
                       const std::string& name = "p") {
    Process p;
    p.out_path = stratsim::test::temp_path(name + ".out");
    p.err_path = stratsim::test::temp_path(name + ".err");
    p.pid = ::fork();
    if (p.pid == 0) {
      std::freopen(p.out_path.c_str(), "w", stdout);
      std::freopen(p.err_path.c_str(), "w", stderr);
      for (const std::string& entry : env) ::putenv(const_cast<char*>(entry.c_str()));
      std::vector<char*> argv;
      for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    return p;
  }

  // Exit status, or -1 when it did not end within `limit` (it is then killed).
  int wait(std::chrono::seconds limit) {
    const auto deadline = Clock::now() + limit;
    int status = 0;
    while (Clock::now() < deadline) {
      if (::waitpid(pid, &status, WNOHANG) == pid)
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    return -1;
  }

  std::string out() const { return stratsim::test::read_file(out_path); }
  std::string err() const { return stratsim::test::read_file(err_path); }

  Process() = default;
  Process(Process&& other) noexcept
      : pid(other.pid), out_path(std::exchange(other.out_path, {})), err_path(std::exchange(other.err_path, {})) {}
  ~Process() {
    if (!out_path.empty()) std::filesystem::remove(out_path);
    if (!err_path.empty()) std::filesystem::remove(err_path);
  }
};

inline std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> children;
  try {  // the process may exit while we read (see ended())
    std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
    for (pid_t child; in >> child;) children.push_back(child);
  } catch (const std::exception&) {
    children.clear();
  }
  return children;
}

inline bool alive(pid_t pid) { return ::kill(pid, 0) == 0; }

// Waits until `pid` has `count` children (the ranks) and returns them.
// The rank a process of ours is (RANK= in its environment, once it has exec'd), or -1: the
// launcher's other child, its rendezvous watcher, has none.
inline int rank_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ");
  std::string entry;
  try {
    while (std::getline(in, entry, '\0'))
      if (entry.rfind("RANK=", 0) == 0) return std::stoi(entry.substr(5));
  } catch (const std::exception&) {
  }
  return -1;
}

// Waits until `pid` has `count` rank processes and returns them, in rank order.
inline std::vector<pid_t> wait_for_ranks(pid_t pid, std::size_t count) {
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < deadline) {
    std::vector<pid_t> ranks(count, -1);
    std::size_t found = 0;
    for (pid_t child : children_of(pid)) {
      const int rank = rank_of(child);
      if (rank >= 0 && static_cast<std::size_t>(rank) < count && ranks[rank] < 0) {
        ranks[rank] = child;
        ++found;
      }
    }
    if (found == count) return ranks;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return {};
}

// A process that has exited: gone from /proc, or a zombie not yet reaped. A process that exits
// between the open and the read fails the read with ESRCH, which libstdc++'s filebuf throws
// ("basic_filebuf::underflow error reading the file: No such process"): that is an ending too.
inline bool ended(pid_t pid) {
  std::string stat;
  try {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    stat.assign(std::istreambuf_iterator<char>(in), {});
  } catch (const std::exception&) {
    return true;
  }
  const std::size_t after_name = stat.rfind(')');
  return stat.empty() || (after_name != std::string::npos && stat.find(" Z ", after_name) == after_name + 1);
}

inline double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// The launcher's exit status, and when the first of `watched` ended and when the launcher did.
struct Ending {
  int code = -1;
  Clock::time_point first_rank_ended, launcher_ended;
};

// Waits up to `limit` for the launcher (killed past it, code -1) while watching the ranks.
inline Ending wait_watching(Process& launcher, const std::vector<pid_t>& watched, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  Ending ending;
  bool seen = false;
  int status = 0;
  while (Clock::now() < deadline) {
    for (pid_t rank : watched)
      if (!seen && ended(rank)) {
        seen = true;
        ending.first_rank_ended = Clock::now();
      }
    if (::waitpid(launcher.pid, &status, WNOHANG) == launcher.pid) {
      ending.launcher_ended = Clock::now();
      if (!seen) ending.first_rank_ended = ending.launcher_ended;
      ending.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return ending;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(launcher.pid, SIGKILL);
  ::waitpid(launcher.pid, &status, 0);
  ending.launcher_ended = Clock::now();
  return ending;
}

// Ranks are gone once the launcher returned: it reaps them all.
inline void expect_reaped(const std::vector<pid_t>& ranks) {
  for (pid_t rank : ranks) EXPECT_FALSE(alive(rank)) << "rank process " << rank << " left behind";
}

}  // namespace stratsim::test::processes
