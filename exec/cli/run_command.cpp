// stratsim run: execute the plan's program for real, one process per rank.
//
// Without RANK/WORLD_SIZE in the environment it is the launcher: it checks the inputs once,
// then starts --nproc copies of this very command line as ranks (exec/launcher.hpp). With them
// (set by our launcher, torchrun --no-python, srun or mpirun wrappers) it is one rank: plan,
// rendezvous, execute, post its record through the store; rank 0 gathers the records and writes
// the report, trace and timeline in the simulator's formats.
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "stratsim/cli/command.hpp"
#include "stratsim/core/errors.hpp"
#include "stratsim/core/model_io.hpp"
#include "stratsim/core/plan.hpp"
#include "stratsim/core/planner.hpp"
#include "stratsim/core/run_analysis.hpp"
#include "stratsim/exec/backend.hpp"
#include "stratsim/exec/executor.hpp"
#include "stratsim/exec/launcher.hpp"
#include "stratsim/exec/train.hpp"

namespace stratsim::cli {
namespace {

using core::InputError;

struct RunArgs {
  std::string backend = "gloo";
  int nproc = 0;  // 0: the plan's world size
  std::string model = "zoo:Net";
  std::string plan = "builtin:ddp";
  int iterations = 0;
  std::string compute = "gemm";
  double compute_scale = 1.0;
  double timeout = 30;
  std::string rendezvous;
  std::string bind = "127.0.0.1";
  std::string trace, timeline, output;
  bool json = false;
  bool quiet = false;
  bool progress = false;
  bool train = false;  // real values and a parity check against local training
  std::uint64_t seed = 0;
  double atol = 1e-5, rtol = 1.3e-6;
};

struct Planned {
  core::Model model;
  core::Plan plan;
  core::PlanResult result;  // as `rank` sees it (the program is the same for every rank)
};

Planned plan_run(const RunArgs& args, int rank = 0) {
  Planned planned{core::load_model(args.model), core::load_plan(args.plan), {}};
  core::PlanOptions options;
  options.iterations = args.iterations;
  options.rank = rank < planned.plan.world_size ? rank : 0;  // a mismatched WORLD_SIZE is reported by the caller
  planned.result = core::plan_training(planned.model, planned.plan, options);
  return planned;
}

// Fault injection, for the fault tests (exec/README.md "Failures never hang"):
// STRATSIM_FAULT=RANK:PHASE:SIGNAL makes rank RANK send itself SIGNAL (KILL or STOP) at PHASE:
// `start` (before it rendezvouses: the others wait in the rendezvous), `connected` (after the
// rendezvous, before the start barrier) or `run` (halfway through its program).
struct Fault {
  int rank = -1;
  std::string phase;
  int signal = 0;
};

std::optional<Fault> fault_from_environment() {
  const char* text = std::getenv("STRATSIM_FAULT");
  if (!text || !*text) return std::nullopt;
  const std::string spec = text;
  const auto bad = [&] {
    return InputError(
        fmt::format("STRATSIM_FAULT={}: expected RANK:PHASE:SIGNAL, PHASE start, connected or run, "
                    "SIGNAL KILL or STOP",
                    spec));
  };
  const std::size_t first = spec.find(':'), second = spec.find(':', first == std::string::npos ? 0 : first + 1);
  if (first == std::string::npos || second == std::string::npos) throw bad();
  Fault fault;
  const std::string rank = spec.substr(0, first), signal = spec.substr(second + 1);
  fault.phase = spec.substr(first + 1, second - first - 1);
  const auto [end, error] = std::from_chars(rank.data(), rank.data() + rank.size(), fault.rank);
  if (error != std::errc() || end != rank.data() + rank.size() || fault.rank < 0) throw bad();
  if (fault.phase != "start" && fault.phase != "connected" && fault.phase != "run") throw bad();
  if (signal == "KILL") fault.signal = SIGKILL;
  else if (signal == "STOP") fault.signal = SIGSTOP;
  else throw bad();
  return fault;
}

void inject_fault(const std::optional<Fault>& fault, int rank, const std::string& phase) {
  if (fault && fault->rank == rank && fault->phase == phase) ::raise(fault->signal);
}

// A rank that gave up waiting on a peer exits with kTimedOutStatus, so the launcher blames the
// peer. Gloo says so only in words: "Timed out waiting ..." in a collective or a pair's connect,
// "Wait timeout for key(s)" in the store.
int comm_exit_status(const std::string& message) {
  const bool timed_out =
      message.find("Timed out") != std::string::npos || message.find("Wait timeout") != std::string::npos;
  return timed_out ? exec::kTimedOutStatus : 1;
}

std::chrono::milliseconds timeout_of(const RunArgs& args) {
  return std::chrono::milliseconds(static_cast<long long>(args.timeout * 1000));
}

std::optional<int> env_int(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < 0 || value > INT_MAX)
    throw InputError(fmt::format("environment {}={}: expected a non-negative integer", name, text));
  return static_cast<int>(value);
}

std::string env_text(const char* name, const std::string& fallback = "") {
  const char* text = std::getenv(name);
  return text != nullptr && *text != '\0' ? text : fallback;
}

// This process's own command line, to start the ranks with exactly the same arguments.
std::vector<std::string> own_command() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> command;
  for (std::string arg; std::getline(in, arg, '\0');) command.push_back(arg);
  char exe[PATH_MAX] = {};
  const ssize_t length = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (command.empty() || length <= 0) throw InputError("cannot read this process's command line from /proc");
  command.front() = std::string(exe, static_cast<std::size_t>(length));
  return command;
}

std::string host_description(const exec::Backend& backend, const RunArgs& args) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  if (backend.name() == "nccl") return fmt::format("{} nccl ranks on {} (one GPU each)", backend.world_size(), host);
  return fmt::format("{} {} ranks on {} ({} hardware threads), TCP via {}", backend.world_size(), backend.name(), host,
                     std::thread::hardware_concurrency(), args.bind);
}

// "[#####     ] 52% (120/231 ops)" on stderr, at most five times a second, rank 0 only.
void draw_progress(std::size_t done, std::size_t total) {
  static auto last = std::chrono::steady_clock::time_point{};
  const auto now = std::chrono::steady_clock::now();
  if (done != total && now - last < std::chrono::milliseconds(200)) return;
  last = now;
  const int width = 30, filled = static_cast<int>(width * done / total);
  std::cerr << fmt::format("\rrunning [{}{}] {:3}% ({}/{} ops)", std::string(filled, '#'),
                           std::string(width - filled, ' '), 100 * done / total, done, total)
            << (done == total ? "\n" : "") << std::flush;
}

std::unique_ptr<exec::Backend> make_backend(const RunArgs& args, const exec::Rendezvous& rendezvous, int rank,
                                            int world_size) {
  exec::BackendOptions options;
  options.timeout = timeout_of(args);
  options.bind_address = args.bind;
  if (args.backend == "nccl")
    return exec::make_nccl_backend(rendezvous, rank, world_size, env_int("LOCAL_RANK").value_or(0), options);
  return exec::make_gloo_backend(rendezvous, rank, world_size, options);
}

void check_backend(const RunArgs& args) {
  if (args.backend != "gloo" && args.backend != "nccl")
    throw InputError(fmt::format("--backend {}: expected gloo or nccl", args.backend));
  if (args.backend == "nccl" && !exec::nccl_available())
    throw InputError("--backend nccl: this stratsim was built without CUDA and NCCL; use --backend gloo");
}

// --train on one rank: the program on real values; rank 0 writes the parity report (and the
// measured timeline when asked). Returns 1 when parity fails.
int train_rank(const RunArgs& args, exec::Backend& backend, const Planned& planned, int rank) {
  const core::PlanResult& mine = planned.result;
  exec::TrainOptions options{args.seed, args.atol, args.rtol};
  const exec::TrainRecord record = exec::run_training(planned.model, planned.plan, mine, backend, options);
  backend.publish(fmt::format("train/{}", rank), exec::encode(record));
  if (rank != 0) return 0;
  std::vector<exec::TrainRecord> records;
  for (int r = 0; r < backend.world_size(); ++r)
    records.push_back(exec::decode_train_record(backend.fetch(fmt::format("train/{}", r))));
  const exec::TrainingSummary summary = exec::summarize(planned.model, planned.plan, mine, records, options);
  const std::string report = args.json ? exec::training_json(summary).dump(2) + "\n" : exec::training_text(summary);
  std::vector<exec::RankRecord> timings;
  for (const exec::TrainRecord& r : records) timings.push_back(r.timing);
  const core::RunResult result =
      exec::assemble(planned.result.program, timings, backend.name(), host_description(backend, args) + ", training");
  write_run_outputs({args.json, args.output, args.trace, args.timeline}, planned.result.program, result, report,
                    core::workload_of(planned.model, planned.plan));
  if (!summary.passed) std::cerr << "stratsim run --train: parity with local training FAILED\n" << std::flush;
  return summary.passed ? 0 : 1;
}

int run_rank(const RunArgs& args, int rank, int world_size) {
  const std::optional<Fault> fault = fault_from_environment();
  inject_fault(fault, rank, "start");
  // Started by torchrun or srun: rank 0 writes the outputs, on its own host.
  if (rank == 0) check_outputs_writable({args.json, args.output, args.trace, args.timeline});
  const Planned planned = plan_run(args, rank);
  if (planned.result.program.world_size != world_size)
    throw InputError(fmt::format("rank {}: the plan needs {} ranks but WORLD_SIZE is {}", rank,
                                 planned.result.program.world_size, world_size));
  const std::string spec = args.rendezvous.empty() ? env_text("STRATSIM_RDZV") : args.rendezvous;
  if (spec.empty())
    throw InputError(
        fmt::format("rank {}: no rendezvous: set STRATSIM_RDZV=file:DIR (a directory every rank "
                    "sees) or redis://HOST[:PORT], or pass --rdzv",
                    rank));
  const exec::Rendezvous rendezvous =
      exec::parse_rendezvous(spec, env_text("STRATSIM_RUN_ID", env_text("TORCHELASTIC_RUN_ID", "default")));
  exec::ExecOptions options;
  options.compute = *exec::parse_compute_mode(args.compute);
  options.compute_scale = args.compute_scale;
  // Fail fast: the other stream threads may sit in a collective until the timeout, and this
  // process's exit is what tells the peers (their sockets close) that this rank is gone.
  if (rank == 0 && !args.quiet && (args.progress || ::isatty(STDERR_FILENO))) options.on_progress = draw_progress;
  options.on_error = [](const std::string& message) {
    std::cerr << ("stratsim run: " + message + "\n") << std::flush;  // one write: ranks share stderr
    std::_Exit(comm_exit_status(message));
  };
  if (fault && fault->rank == rank && fault->phase == "run") {
    options.on_progress = [fault, rank, draw = options.on_progress](std::size_t done, std::size_t total) {
      if (draw) draw(done, total);
      if (2 * done >= total) inject_fault(fault, rank, "run");
    };
  }
  try {
    auto backend = make_backend(args, rendezvous, rank, world_size);
    inject_fault(fault, rank, "connected");
    if (args.train) return train_rank(args, *backend, planned, rank);
    const exec::RankRecord record = exec::execute(planned.result.program, *backend, options);
    backend->publish(fmt::format("record/{}", rank), exec::encode(record));
    if (rank != 0) return 0;
    std::vector<exec::RankRecord> records;
    for (int r = 0; r < world_size; ++r)
      records.push_back(exec::decode_record(backend->fetch(fmt::format("record/{}", r))));
    const core::RunResult result =
        exec::assemble(planned.result.program, records, backend->name(), host_description(*backend, args));
    write_run_outputs({args.json, args.output, args.trace, args.timeline}, planned.result.program, result,
                      core::workload_of(planned.model, planned.plan));
    return 0;
  } catch (const exec::CommError& error) {
    std::cerr << ("stratsim run: " + std::string(error.what()) + "\n") << std::flush;
    std::_Exit(comm_exit_status(error.what()));
  } catch (const core::InputError&) {
    throw;
  } catch (const core::PlanError&) {
    throw;
  } catch (const std::exception& error) {
    // The program and the values disagree (--train): say where, and leave at once so the peers'
    // sockets close.
    std::cerr << fmt::format("stratsim run: rank {}: {}\n", rank, error.what()) << std::flush;
    std::_Exit(1);
  }
}

int run_launcher(const RunArgs& args) {
  check_outputs_writable({args.json, args.output, args.trace, args.timeline});  // rank 0 writes them, at the end
  const Planned planned = plan_run(args);  // bad inputs fail once, here, with exit status 2
  if (args.train) {
    const std::string why = exec::train_unsupported_reason(planned.model, planned.plan, planned.result);
    if (!why.empty()) throw InputError("--train: " + why);
  }
  const int nproc = args.nproc > 0 ? args.nproc : planned.result.program.world_size;
  if (nproc != planned.result.program.world_size)
    throw InputError(
        fmt::format("--nproc {}: the plan needs {} ranks (its world_size)", nproc, planned.result.program.world_size));
  if (nproc > exec::kMaxLocalRanks)
    throw InputError(
        fmt::format("the plan needs {} ranks: this launcher starts at most {} on one host (start the "
                    "ranks on several hosts with torchrun or srun, RANK and WORLD_SIZE set)",
                    nproc, exec::kMaxLocalRanks));
  // What every rank would otherwise find, each printing the same error: checked once, here.
  if (!args.rendezvous.empty()) exec::parse_rendezvous(args.rendezvous, "launcher-check");
  if (args.backend == "gloo") exec::check_bind_address(args.bind);
  fault_from_environment();
  if (args.backend == "nccl") {
    // One GPU per rank: refuse before starting anything, not in every rank.
    std::string why;
    const int gpus = exec::visible_gpus(why);
    if (gpus == 0) throw InputError(fmt::format("--backend nccl: no usable CUDA GPU on this host ({})", why));
    if (nproc > gpus)
      throw InputError(fmt::format("--nproc {}: this host has {} GPU(s) and NCCL runs one rank per GPU", nproc, gpus));
  }
  exec::LaunchOptions options;
  options.nproc = nproc;
  options.command = own_command();
  options.timeout = timeout_of(args);
  options.rendezvous = args.rendezvous;
  options.run_id = env_text("STRATSIM_RUN_ID");
  return exec::launch(options);
}

int run_command(const RunArgs& args) {
  check_backend(args);
  // Checked in ranks too: torchrun and srun start ranks without our launcher.
  if (args.train && args.backend != "gloo")
    throw InputError("--train runs on the gloo backend (its tensors live in host memory)");
  if (!exec::parse_compute_mode(args.compute))
    throw InputError(fmt::format("--compute {}: expected gemm, wait or skip", args.compute));
  const std::optional<int> rank = env_int("RANK"), world = env_int("WORLD_SIZE");
  if (rank && world) {
    if (*rank >= *world) throw InputError(fmt::format("RANK={} is not below WORLD_SIZE={}", *rank, *world));
    return run_rank(args, *rank, *world);
  }
  return run_launcher(args);
}

const Register run_registration("run", [](CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd =
      app.add_subcommand("run", "Execute the plan's program for real: one process per rank (Gloo, or NCCL on GPUs)");
  cmd->add_option("--backend", args->backend, "gloo (CPU processes over TCP) or nccl (one CUDA GPU per rank)")
      ->capture_default_str();
  cmd->add_option("--nproc", args->nproc, "Ranks to start on this host (default: the plan's world size)")
      ->check(CLI::Range(1, exec::kMaxLocalRanks));
  cmd->add_option("--model", args->model, "Model file (JSON/YAML) or zoo:NAME[:key=value,...]")->capture_default_str();
  cmd->add_option("--plan", args->plan, "Plan file (JSON/YAML) or builtin:NAME")->capture_default_str();
  cmd->add_option("--iterations", args->iterations, "Training micro-steps (default: the plan's, else 3)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--compute", args->compute, "gemm (real GEMMs of each op's FLOPs) | wait (calibrated sleep) | skip")
      ->capture_default_str();
  cmd->add_option("--compute-scale", args->compute_scale, "Multiply every compute op's FLOPs by this")
      ->check(finite_at_least(0, /*strictly=*/true))
      ->capture_default_str();
  cmd->add_option("--timeout", args->timeout,
                  "Seconds a rank waits for a peer (rendezvous, collectives) before failing")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  cmd->add_option("--rdzv", args->rendezvous,
                  "Rendezvous: file:DIR or redis://HOST[:PORT] (default: $STRATSIM_RDZV, or a private directory "
                  "when this command launches the ranks)");
  cmd->add_option("--bind", args->bind, "Address this host's ranks listen on for peers")->capture_default_str();
  cmd->add_flag("--json", args->json, "Write the JSON report instead of text");
  cmd->add_flag("--quiet", args->quiet, "No progress bar (drawn by rank 0 when stderr is a terminal)");
  cmd->add_flag("--progress", args->progress,
                "Draw the progress bar even when stderr is not a terminal (for a program that reads it)");
  cmd->add_option("-o,--output", args->output, "Write the report to this file instead of standard output");
  cmd->add_flag("--train", args->train,
                "Train for real (float32 values through the program's collectives) and check the parameters against "
                "single-process training on the global batch");
  cmd->add_option("--seed", args->seed, "--train: seed of the initial parameters and the synthetic batches")
      ->capture_default_str();
  cmd->add_option("--atol", args->atol, "--train: absolute tolerance per element")
      ->check(finite_at_least(0))
      ->capture_default_str();
  cmd->add_option("--rtol", args->rtol, "--train: relative tolerance per element")
      ->check(finite_at_least(0))
      ->capture_default_str();
  cmd->add_option("--trace", args->trace, "Write a Chrome-trace JSON timeline (Perfetto, chrome://tracing, HTA)");
  cmd->add_option("--timeline", args->timeline, "Write the stratsim timeline JSON (the viewer's format)");
  return Subcommand{cmd, [args] { return run_command(*args); }};
});

}  // namespace
}  // namespace stratsim::cli
