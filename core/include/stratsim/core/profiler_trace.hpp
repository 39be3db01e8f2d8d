// PyTorch profiler traces (Kineto's Chrome-trace JSON from torch.profiler's export_chrome_trace or
// tensorboard_trace_handler, one file per rank) read as what each rank ran: its profiled steps
// (ProfilerStep#N), its collectives with kind, bytes, dtype and process group, and its compute.
// `stratsim compare` matches them against a simulation (op_matching.hpp); the viewer shows them.
//
// Collectives are recognised the way Holistic Trace Analysis does: on GPU traces, kernels named
// `nccl*` / `*ncclKernel*` / `*ncclDevKernel*`, described by the `Collective name`, `In msg nelems`,
// `Out msg nelems`, `dtype` and `Process Group Ranks` arguments Kineto copies onto them from
// record_param_comms (or, in older traces, found on record_param_comms through the launch's
// correlation); on CPU traces (Gloo), the backend's `gloo:all_reduce` annotations on its worker
// threads, sized from their recorded input shapes, with the `c10d::allreduce_` call that enqueued
// each one as its issue time.
//
//   const core::ProfilerTrace trace = core::read_profiler_trace({"traces/"});  // rank0.json, rank1.json
//   for (const core::TraceCollective& c : trace.ranks[0].collectives) use(c.kind, c.bytes, c.end - c.start);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "stratsim/core/program.hpp"

namespace stratsim::core {

// One collective one rank ran.
struct TraceCollective {
  std::string name;                    // the event: "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "gloo:all_reduce"
  std::string collective;              // PyTorch's name for it: "allreduce", "all_gather", "broadcast", "barrier"
  std::optional<CollectiveKind> kind;  // none: a collective stratsim does not model (barrier, send, gather)
  // CommDebugMode's key: the c10d call ("c10d.allreduce_"), from the Gloo call that enqueued it
  // or from record_param_comms' name; "" when the trace does not say.
  std::string comm_key;
  std::string dtype;  // as the trace spells it ("Float", "long int"); "" when unknown
  // Per-rank buffers and the logical size by program.hpp's convention (all-gather: the output,
  // reduce-scatter: the input, the others: the buffer); -1 when the trace does not say.
  std::int64_t input_bytes = -1, output_bytes = -1, bytes = -1;
  std::string group_name;  // the process group's name ("0") or description ("default_pg"); "" unknown
  std::vector<int> group;  // its member ranks; empty when the trace does not say
  int group_size = 0;      // members; 0 when the trace does not say
  int step = -1;           // the ProfilerStep#N it was issued in; -1: outside every profiled step
  int stream = 0;          // index into RankTrace::streams
  // Seconds on the trace's clock (read_profiler_trace: one origin for all ranks): when the CPU
  // issued it, and when the kernel (GPU) or the backend's worker (Gloo) ran it, waiting for peers
  // included, as the profiler shows it.
  double issued = 0, start = 0, end = 0;
};

// Compute as the profiler saw it: a GPU kernel, copy or memset on its stream; on a trace with no
// GPU activity, a CPU op that no other CPU op on its thread encloses.
struct TraceActivity {
  std::string name;
  int stream = 0;
  int step = -1;
  double start = 0, end = 0;
};

// One ProfilerStep#N annotation: a training step the profiler recorded.
struct TraceStep {
  int number = 0;
  double start = 0, end = 0;
};

struct RankTrace {
  std::string file;
  int rank = 0;
  int world_size = 0;                        // distributedInfo.world_size; 0 when absent
  std::string backend;                       // distributedInfo.backend: "nccl", "gloo"; "" unknown
  std::vector<std::string> streams;          // "stream 7" (GPU), "thread 4242 (pt_main_thread)" (CPU)
  std::vector<TraceStep> steps;              // by start
  std::vector<TraceActivity> activities;     // by start
  std::vector<TraceCollective> collectives;  // by issue time
  // Where the rank's times start: its first event's ts (microseconds) after baseTimeNanoseconds.
  std::int64_t base_ns = 0;
  double first_ts_us = 0;
};

struct ProfilerTrace {
  int world_size = 0;            // the largest distributedInfo.world_size, else the number of ranks
  std::vector<RankTrace> ranks;  // by rank, one per file
};

// Whether a parsed JSON document looks like a Chrome trace (an object with "traceEvents") rather
// than one of stratsim's own documents.
bool is_profiler_trace(const nlohmann::json& document);

// One rank's trace from its parsed JSON; `origin` names it in errors. Times are seconds from the
// rank's first event. Throws InputError ("FILE: what is missing") for a document that is not a
// Kineto trace, an event of the wrong shape, or a trace with no ProfilerStep#N.
RankTrace rank_trace_from_json(const nlohmann::json& document, const std::string& origin);

// Reads FILE.json or FILE.json.gz, or every *.json / *.json.gz in a folder, one rank per file,
// and puts the ranks on one clock (baseTimeNanoseconds, so ranks on one host line up). Throws
// InputError naming the file: unreadable, not JSON (truncated: with the line), not a Kineto
// trace, no profiled steps, two files for one rank, a rank past the world size.
ProfilerTrace read_profiler_trace(const std::vector<std::string>& paths);

// Ranks read one by one (rank_trace_from_json) as one trace: checks that no two files are the
// same rank and none is past the world size (InputError naming the file), orders them by rank
// and puts them on one clock.
ProfilerTrace assemble_profiler_trace(std::vector<RankTrace> ranks);

// A file's text, gunzipped when it starts with gzip's magic bytes; the same limits and errors as
// read_text_file (json_reader.hpp).
std::string read_maybe_gzipped_file(const std::string& path);
// The same for bytes in memory; `origin` names them in errors.
std::string maybe_gunzip(std::string data, const std::string& origin);

}  // namespace stratsim::core
