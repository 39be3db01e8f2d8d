// Reading nccl-tests' standard output (core/nccl_tests.hpp): a published two-node run as it was
// printed, the older layout (no root column, no groups, NCCL's logging in between), and what is
// not nccl-tests output.
#include "stratsim/core/nccl_tests.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "../cli_support.hpp"
#include "stratsim/core/errors.hpp"

namespace stratsim::core {
namespace {

const std::string kData = std::string(STRATSIM_TEST_DATA) + "/nccl_tests/";

std::string error_of(const std::string& text) {
  const std::string path = test::temp_path("nccl-tests.txt");
  std::ofstream(path) << text;
  try {
    read_nccl_tests(path);
  } catch (const InputError& error) {
    return std::string(error.what()).substr(path.size());
  }
  return "";
}

TEST(NcclTests, ReadsAPublishedTwoNodeRun) {
  const NcclTestsResult r = read_nccl_tests(kData + "h100_2nodes_all_reduce.txt");
  EXPECT_EQ(r.ranks, 16);
  EXPECT_EQ(r.nodes, 2);
  EXPECT_EQ(r.hosts, (std::vector<std::string>{"ztan-mig-235z", "ztan-mig-gq73"}));
  EXPECT_EQ(r.device, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(r.dtype, "float");
  ASSERT_EQ(r.rows.size(), 31u);  // 8 B to 8 GiB
  EXPECT_EQ(r.rows.front().bytes, 8);
  EXPECT_EQ(r.rows.front().out_of_place_us, 135.8);
  EXPECT_EQ(r.rows.front().in_place_us, 123.5);
  EXPECT_EQ(r.rows.back().bytes, 8589934592.0);
  EXPECT_EQ(r.rows.back().out_of_place_us, 47535);
  EXPECT_EQ(r.rows.back().in_place_us, 47743);
}

TEST(NcclTests, ReadsTheOlderLayout) {
  const NcclTestsResult r = read_nccl_tests(kData + "one_node_all_gather_noroot.txt");
  EXPECT_EQ(r.ranks, 8);
  EXPECT_EQ(r.nodes, 1);
  EXPECT_EQ(r.device, "NVIDIA A100-SXM4-80GB");
  ASSERT_EQ(r.rows.size(), 3u);  // NCCL's INFO line between rows skipped
  EXPECT_EQ(r.rows[1].bytes, 2097152);
  EXPECT_EQ(r.rows[1].out_of_place_us, 40);
  EXPECT_EQ(r.rows[1].in_place_us, 38);
}

TEST(NcclTests, WhatIsNotItsOutputFailsWithTheLine) {
  const std::string ranks =
      "#  Rank  0 Group  0 Pid 1 on a device  0 [0x1] GPU\n#  Rank  1 Group  0 Pid 2 on b device  0 [0x1] GPU\n";
  const std::string header =
      "#  size  count  type  redop  root  time  algbw  busbw #wrong  time  algbw  busbw #wrong\n";
  const std::string row1 = "  1024  256  float  sum  -1  10.0  0.1  0.1  0  9.0  0.1  0.1  0\n";
  const std::string row2 = "  2048  512  float  sum  -1  12.0  0.1  0.1  0  11.0  0.1  0.1  0\n";
  EXPECT_EQ(error_of(header + row1 + row2),
            ": no \"#  Rank N Group G Pid P on HOST device D\" lines: expected nccl-tests' standard output (its rank "
            "list gives the group size and the nodes)");
  EXPECT_EQ(error_of(ranks + row1 + row2), ": no column header (\"#  size  count  type ... time ...\")");
  EXPECT_EQ(error_of(ranks + header + row1), ": expected at least two sizes, got 1");
  EXPECT_EQ(error_of(ranks + header + row2 + row1),
            ":5: size 1024 after 2048: expected increasing sizes (one run per file)");
  EXPECT_EQ(error_of(ranks + header + row1 + "  2048  512  half  sum  -1  12.0  0.1  0.1  0  11.0  0.1  0.1  0\n"),
            ":5: type half after float: one data type per file");
  EXPECT_EQ(error_of(ranks + header + "  1024  256  float  sum  -1  10.0\n"),
            ":4: expected 13 columns as the header names, got 6");
  EXPECT_EQ(error_of(ranks + header + "  1024  256  float  sum  -1  fast  0.1  0.1  0  9.0  0.1  0.1  0\n"),
            ":4: expected positive times in microseconds up to 1e9, got \"fast\" and \"9.0\"");
  EXPECT_EQ(error_of(ranks + header + "  1024  256  float  sum  -1  10.0  0.1  0.1  0  2e9  0.1  0.1  0\n"),
            ":4: expected positive times in microseconds up to 1e9, got \"10.0\" and \"2e9\"");
  // A size past what a double holds as an integer once fell into an int64 cast (fuzzer, CI).
  EXPECT_EQ(error_of(ranks + header + row1 +
                     "  1022222222222222222222222222222  1  float  sum  -1  12.0  0.1  0.1  0  "
                     "11.0  0.1  0.1  0\n"),
            ":5: size 1022222222222222222222222222222 is over 2^50 bytes (stratsim's limit per collective)");
  EXPECT_EQ(error_of(ranks + ranks), ":3: rank 0 is listed twice (one run per file)");
  EXPECT_THROW(read_nccl_tests(kData + "missing.txt"), InputError);
}

}  // namespace
}  // namespace stratsim::core
