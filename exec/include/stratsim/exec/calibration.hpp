// Calibration: measuring the machine stratsim runs on, for `stratsim calibrate`, which writes a
// platform file that `stratsim simulate --platform FILE` takes (a `cpu` preset with this host's
// figures and a cost model of its own).
//
// What is measured, with the kernels `stratsim run --compute gemm` itself runs, so a simulation
// on the calibrated platform predicts those runs:
//  - the host: single-precision GEMM time on a grid of (m, n, k) shapes (Eigen, one thread), the
//    best cache-resident GEMM rate, streaming memory bandwidth, and its core count;
//  - Gloo over loopback: all-reduce, all-gather, reduce-scatter and broadcast time by size, on
//    each requested process count, run as a program through the executor (same code path, same
//    timing points as `stratsim run`), and a segment where compute and all-reduces overlap, for the
//    interference between them (the compute threads and Gloo's transport share the cores).
//
// The network is fitted to t = o + s·alpha + v·h·n·beta per collective instance, with s and v
// the latency steps and volume factor of the algorithm Gloo runs (ring all-reduce and all-gather,
// halving-doubling reduce-scatter, one-to-all broadcast), n the nccl-tests byte count and
// h = max(1, processes / cores) the host contention the simulator applies too.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "stratsim/core/program.hpp"
#include "stratsim/core/run_result.hpp"

namespace stratsim::exec {

struct GemmTiming {
  core::GemmShape shape;
  double seconds = 0;  // one process alone: the best of the repetitions; all ranks busy: the median
};

struct HostMeasurement {
  std::vector<std::int64_t> axis;      // the grid's sizes, for m, n and k alike
  std::vector<GemmTiming> gemms;       // m-major, k fastest
  double gemm_flops_per_second = 0;    // cache-resident blocks: the executor's compute peak
  double memory_bytes_per_second = 0;  // y += a x over 64 MiB
  int cores = 1;
};

// Measures this process's compute. progress(done, total) after each shape.
HostMeasurement measure_host(const std::vector<std::int64_t>& axis, double min_seconds_per_shape,
                             const std::function<void(int, int)>& progress = {});

// The collective sweep, the same on every rank: for each kind and size, `repeats` instances one
// after another on stream "comm" (float32, then float16 all-reduces and reduce-scatters, the
// half-precision collectives of comm hooks and mixed precision); then the interference segment: all-reduces of
// `interference_bytes` alone, compute ops of `interference_flops` alone, and both at once.
// With a `gemm_axis`, the sweep opens with the GEMM grid over it on every rank at once
// (`gemm_repeats` timed instances of each shape after an untimed one, each shape after a 4-byte
// all-reduce that lines the ranks up): the rates of SPMD ranks that compute at the same time,
// which a small host gives less of than one process alone. The executor allocates every shape's
// operands before it starts: about 355 MB per process for the default grid (32 to 2048).
struct SweepSpec {
  int procs = 2;
  std::vector<double> sizes;  // bytes (nccl-tests n)
  int repeats = 5;
  double interference_bytes = 4 << 20;
  double interference_flops = 1e9;
  int interference_ops = 6;
  // All-reduces beside the compute: enough to outlast it (each takes a few ms here, the compute
  // ops ~20 ms each), so the compute ops run wholly beside collectives, as the simulator prices
  // a compute op that starts while one is in flight.
  int interference_comm_ops = 48;
  double stream_bytes = 128 << 20;      // memory-bound ops run on every rank at once
  std::vector<std::int64_t> gemm_axis;  // empty: no GEMM grid
  int gemm_repeats = 5;
};
core::Program sweep_program(const SweepSpec& spec);

struct CollectiveSample {
  core::CollectiveKind kind = core::CollectiveKind::all_reduce;
  core::DType dtype = core::DType::float32;  // float16: Gloo reduces half precision in software
  int procs = 2;
  double bytes = 0;
  double seconds = 0;  // mean over the repeats
};

struct SweepResult {
  std::vector<CollectiveSample> samples;
  double compute_slowdown = 1;        // compute beside all-reduces / compute alone (>= 1)
  double communication_slowdown = 1;  // all-reduces beside compute / alone (>= 1)
  // The ops the factors come from: those wholly beside the other kind on every rank (0: none
  // was, and the factor averages them all).
  int compute_ops_beside = 0, comm_ops_beside = 0;
  // What every rank streaming at once reaches together: the host's DRAM bandwidth as the ranks
  // share it (one process alone reaches less than this only on a small host).
  double shared_memory_bytes_per_second = 0;
  // The GEMM grid with every rank computing (m, n, k in axis order, k fastest; empty without a
  // gemm_axis): each shape's median over its instances and the ranks.
  std::vector<GemmTiming> busy_gemms;
};
// Reads the measured run of sweep_program(spec). Throws core::InputError on a result that does
// not belong to that program.
SweepResult read_sweep(const SweepSpec& spec, const core::Program& program, const core::RunResult& run);

// Latency steps and volume factor of what Gloo runs for `kind` over p ranks (p a power of two
// for reduce-scatter's halving-doubling).
struct GlooCost {
  int steps = 0;
  double volume = 0;
};
GlooCost gloo_cost(core::CollectiveKind kind, int p);

struct KindFit {
  double overhead = 0;  // seconds per collective
  double alpha = 0;     // seconds per latency step (one message between two processes)
  double beta = 0;      // seconds per byte of the volume on one process's loopback link
};
// One fit per collective kind: Gloo's kinds differ more than one link explains (its in-place
// halving-doubling reduce-scatter moves several times the bytes of its all-gather).
struct NetworkFit {
  std::map<core::CollectiveKind, KindFit> kinds;       // float32
  std::map<core::CollectiveKind, KindFit> half_kinds;  // float16 (and bfloat16, reduced as float16)
  double mean_abs_error = 0;                           // of the fit over the samples, relative
};
// Least squares on relative error per kind, coefficients kept >= 0; alpha is 0 for a kind
// measured on one process count only (then it cannot be told from the overhead).
NetworkFit fit_network(const std::vector<CollectiveSample>& samples, int cores);
double predict(const NetworkFit& fit, const CollectiveSample& sample, int cores);

// The platform description (YAML) for `simulate --platform FILE`: preset cpu with this host's
// figures, the fitted network and a cost model holding the GEMM table and the interference.
struct Calibration {
  HostMeasurement host;
  SweepResult sweep;
  NetworkFit network;
  std::vector<int> procs;
  // The GEMM grid measured by each sweep whose processes had a core each, ascending in procs.
  struct BusyGrid {
    int procs = 0;
    std::vector<GemmTiming> gemms;
  };
  std::vector<BusyGrid> busy;
  std::string host_name, date, command;
};
std::string platform_yaml(const Calibration& calibration);

}  // namespace stratsim::exec
