// nccl-tests results (NVIDIA/nccl-tests: all_reduce_perf, all_gather_perf, reduce_scatter_perf,
// broadcast_perf, alltoall_perf) as their standard output prints them: what one run measured, for
// `stratsim calibrate --nccl-tests`, which turns it into measured curves of a cost model
// (sim/cost_model.hpp, MeasuredCurve).
//
// The output lists the ranks it ran ("#  Rank  0 Group  0 Pid 6899 on HOST device 0 [..] NAME"),
// a two-line column header ("#  size  count  type  redop  root  time  algbw  busbw  #wrong  time
// ..."; older versions have no root column) and one row per size, out-of-place columns before
// in-place ones. Other lines (NCCL's own logging, mpirun's) are skipped.
#pragma once

#include <string>
#include <vector>

namespace stratsim::core {

struct NcclTestsRow {
  double bytes = 0;            // the size column: nccl-tests' n (all-gather's output, reduce-scatter's input)
  double out_of_place_us = 0;  // time per call, microseconds
  double in_place_us = 0;
};

struct NcclTestsResult {
  int ranks = 0;                   // the rank lines
  int nodes = 0;                   // the distinct hosts they ran on
  std::string dtype;               // the type column ("float", "half", "bfloat16", ...)
  std::string device;              // the first rank's device name ("NVIDIA H100 80GB HBM3")
  std::vector<std::string> hosts;  // in rank order of first appearance
  std::vector<NcclTestsRow> rows;  // sizes increasing
};

// Throws InputError naming the file (and the line) on output that is not nccl-tests': no rank
// lines, no column header, a row that does not fit the header, sizes out of order, mixed types.
NcclTestsResult read_nccl_tests(const std::string& path);
// The same for text in memory; `origin` names it in errors.
NcclTestsResult parse_nccl_tests(const std::string& text, const std::string& origin);

}  // namespace stratsim::core
