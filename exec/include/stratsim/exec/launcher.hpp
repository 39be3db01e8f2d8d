// The local launcher: starts N rank processes of the same command with torchrun's environment
// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE) plus the rendezvous, supervises them and
// reaps every one. It never hangs: when a rank dies or fails, the others get the configured
// timeout to fail on their own (they do, since every collective and rendezvous has it), then
// whatever is still running is named as hung and killed. Ctrl-C (SIGINT) or SIGTERM stops all
// ranks; a rank whose launcher dies is killed by the kernel (PR_SET_PDEATHSIG).
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace stratsim::exec {

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
