// The executor: runs one rank's share of a program for real. Every stream is a thread, ops wait
// for their cross-stream dependencies, collectives go through the backend's communicators on
// buffers of the program's sizes and dtypes (one communicator per group instance and stream, so
// concurrent streams overlap for real), and compute ops are real GEMMs of the op's FLOPs or a
// calibrated wait.
//
// Usage, on rank `rank` of `world` (threads or processes meeting in a directory they all see), in
// namespace stratsim::exec, with `records` a std::vector<RankRecord>:
//
//   const core::Program program = core::plan_training(model, plan, {}).program;  // core/planner.hpp
//   auto backend = make_gloo_backend(parse_rendezvous("file:/shared/rdzv", "run-1"), rank, world, {});
//   backend->publish("record/" + std::to_string(rank), encode(execute(program, *backend, {})));
//   for (int r = 0; r < world; ++r) records.push_back(decode_record(backend->fetch("record/" + std::to_string(r))));
//   const core::RunResult result = assemble(program, records, "gloo", "this host");  // rank 0, every record in
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stratsim/core/program.hpp"
#include "stratsim/core/run_result.hpp"
#include "stratsim/exec/backend.hpp"

namespace stratsim::exec {

// gemm: real single-precision work: a GEMM op that carries its shapes (ProgramOp::gemms) runs
//       exactly those Eigen GEMMs; other ops run kernels chosen by their FLOPs and bytes (times
//       compute_scale, under which shapes are not run).
// wait: sleep for FLOPs / the rank's GEMM rate, measured once at start (no CPU contention with
//       the communication threads, for runs that study the network only).
// skip: compute takes no time; only collectives run.
enum class ComputeMode { gemm, wait, skip };
std::optional<ComputeMode> parse_compute_mode(std::string_view text);
std::string_view compute_mode_name(ComputeMode mode);

struct ExecOptions {
  ComputeMode compute = ComputeMode::gemm;
  double compute_scale = 1.0;  // multiplies every compute op's FLOPs (shrink a large model to a CPU box)
  // Called from the failing thread on the first error, before the other threads are joined (they
  // may be blocked in a collective until the timeout). A worker process exits here.
  std::function<void(const std::string& message)> on_error;
  // Called after every op with (ops done, ops in the program), from the stream threads one at a
  // time: a progress bar.
  std::function<void(std::size_t done, std::size_t total)> on_progress;
};

// What one rank measured, in seconds from its origin: the instant the start barrier released it.
struct RankRecord {
  int rank = 0;
  std::vector<core::OpTiming> timings;  // per op id: issue = start = entering the op, end = leaving it
  std::vector<std::string> algorithms;  // per op id: what the library ran ("" for compute)
  double gemm_flops_per_second = 0;     // this rank's calibrated GEMM rate
  double memory_bytes_per_second = 0;   // this rank's measured memory bandwidth (0: not measured)
  double wall_seconds = 0;              // origin to the last op's end
};

// Runs the program on backend.rank(). Throws CommError (a peer died or hung) or core::InputError.
RankRecord execute(const core::Program& program, Backend& backend, const ExecOptions& options);

// Ranks post their records through the rendezvous store; rank 0 assembles the run.
std::string encode(const RankRecord& record);
RankRecord decode_record(const std::string& text);

// One measured run: every rank recorded; a collective instance starts when its last member
// entered it (origins are aligned by the start barrier) and ends when its last member left it.
core::RunResult assemble(const core::Program& program, const std::vector<RankRecord>& records,
                         const std::string& source, const std::string& platform);

}  // namespace stratsim::exec
