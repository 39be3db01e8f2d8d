// The local launcher: starts N rank processes of the same command with torchrun's environment
// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE) plus the rendezvous, supervises them and
// reaps every one. It never hangs: a rank that waits on a dead or stopped peer fails within the
// configured timeout on its own (every collective and the whole rendezvous are bounded by it);
// once a rank has failed, the others get kFailureGrace to end, then whatever still runs is named
// as hung and killed. So a run ends within timeout + kFailureGrace of a fault. Ctrl-C (SIGINT) or
// SIGTERM stops all ranks; a rank whose launcher dies is killed by the kernel (PR_SET_PDEATHSIG),
// and the private rendezvous directory is removed by a small watcher process even when the
// launcher is killed with SIGKILL.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace stratsim::exec {

// How long the other ranks get to end once one has failed: a peer's death reaches them at once
// (their sockets close); a peer's hang reached them through their own timeout already.
inline constexpr std::chrono::seconds kFailureGrace{2};
// The exit status of a rank that timed out waiting for a peer (a collective, the rendezvous):
// the launcher then blames the rank that is still running, not the one that gave up on it.
inline constexpr int kTimedOutStatus = 3;
// Ranks one launcher starts on one host: one process each.
inline constexpr int kMaxLocalRanks = 1024;

struct LaunchOptions {
  int nproc = 1;
  std::vector<std::string> command;                             // command[0]: the executable; run once per rank
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};  // the ranks' own timeout
  std::string run_id;                                           // STRATSIM_RUN_ID for the ranks; empty: a fresh one
  std::string rendezvous;  // STRATSIM_RDZV for the ranks; empty: a fresh private directory, removed at the end
};

// Exit status: 0 when every rank succeeded; 2 when the ranks rejected their input (every failed
// rank exited with 2); 130 when interrupted; 1 otherwise. Problems go to stderr, one line each,
// naming the rank: died by a signal, exited with a status, or hung.
int launch(const LaunchOptions& options);

}  // namespace stratsim::exec
