// The caching allocator model against PyTorch's: hand-worked cases of each rule, then ten
// recorded histories of one H200 (PyTorch 2.11, Llama 3.1 8B widths, 2-8 layers, FSDP2 at world
// size 1, three activation-checkpointing modes, default and expandable segments) replayed
// through the model, which must reach PyTorch's own reserved peak.
#include "stratsim/core/caching_allocator.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../cli_support.hpp"
#include "stratsim/core/errors.hpp"
#include "stratsim/core/profiler_trace.hpp"

namespace stratsim::core {
namespace {

constexpr std::int64_t MiB = 1 << 20;

TEST(CachingAllocator, RoundsSizesAndPicksThePoolsSegment) {
  EXPECT_EQ(CachingAllocator::rounded_size(1), 512);
  EXPECT_EQ(CachingAllocator::rounded_size(513), 1024);
  EXPECT_EQ(CachingAllocator::segment_size(MiB), 2 * MiB);         // small pool
  EXPECT_EQ(CachingAllocator::segment_size(MiB + 512), 20 * MiB);  // large, under 10 MiB
  EXPECT_EQ(CachingAllocator::segment_size(10 * MiB), 10 * MiB);   // from 10 MiB: rounded to 2 MiB
  EXPECT_EQ(CachingAllocator::segment_size(11 * MiB + 512), 12 * MiB);
}

TEST(CachingAllocator, SplitsLargeBlocksOnlyWhenMoreThanOneMebibyteIsLeft) {
  CachingAllocator allocator;
  const auto a = allocator.allocate(5 * MiB);  // a 20 MiB segment, 15 MiB left free
  EXPECT_EQ(allocator.size_of(a), 5 * MiB);
  EXPECT_EQ(allocator.stats().reserved, 20 * MiB);
  const auto b = allocator.allocate(14 * MiB + MiB / 2);  // fits the 15 MiB rest; 0.5 MiB would be left: kept whole
  EXPECT_EQ(allocator.size_of(b), 15 * MiB);
  EXPECT_EQ(allocator.stats().reserved, 20 * MiB);
  EXPECT_EQ(allocator.stats().allocated, 20 * MiB);
  const auto c = allocator.allocate(3 * MiB);  // nothing free: a second segment
  EXPECT_EQ(allocator.stats().reserved, 40 * MiB);
  EXPECT_EQ(allocator.stats().segments, 2);
  allocator.release(a);
  allocator.release(b);
  allocator.release(c);
  EXPECT_EQ(allocator.stats().allocated, 0);
  EXPECT_EQ(allocator.stats().reserved, 40 * MiB);  // cached, never handed back
  EXPECT_EQ(allocator.stats().peak_allocated, 23 * MiB);
}

TEST(CachingAllocator, SmallBlocksSplitDownTo512Bytes) {
  CachingAllocator allocator;
  const auto a = allocator.allocate(MiB);
  const auto b = allocator.allocate(MiB - 512);  // the second half of the 2 MiB segment, 512 B left
  EXPECT_EQ(allocator.size_of(b), MiB - 512);
  const auto c = allocator.allocate(100);
  EXPECT_EQ(allocator.stats().segments, 1);
  EXPECT_EQ(allocator.size_of(c), 512);
  const auto d = allocator.allocate(2 * MiB);  // the large pool never serves from small segments
  EXPECT_EQ(allocator.stats().segments, 2);
  for (auto block : {a, b, c, d}) allocator.release(block);
}

TEST(CachingAllocator, BestFitThenMergeOnFree) {
  CachingAllocator allocator;
  const auto big = allocator.allocate(100 * MiB);
  const auto small = allocator.allocate(40 * MiB);
  allocator.release(big);
  allocator.release(small);
  // Free: 100 and 40 MiB blocks in two segments. 30 MiB takes the 40 (best fit) and splits it.
  const auto x = allocator.allocate(30 * MiB);
  EXPECT_EQ(allocator.stats().reserved, 140 * MiB);
  const auto y = allocator.allocate(90 * MiB);  // the 100, split; the 40's 10 MiB rest is too small
  EXPECT_EQ(allocator.stats().reserved, 140 * MiB);
  const auto z = allocator.allocate(15 * MiB);  // two 10 MiB rests, neither fits: a new segment
  EXPECT_EQ(allocator.stats().reserved, 156 * MiB);
  allocator.release(x);  // merges with its 10 MiB rest: 40 MiB free again
  const auto w = allocator.allocate(40 * MiB);
  EXPECT_EQ(allocator.stats().reserved, 156 * MiB);
  for (auto block : {y, z, w}) allocator.release(block);
}

TEST(CachingAllocator, StreamsDoNotShareBlocks) {
  CachingAllocator allocator;
  allocator.release(allocator.allocate(64 * MiB, 0));
  allocator.allocate(64 * MiB, 7);
  EXPECT_EQ(allocator.stats().reserved, 128 * MiB);
}

TEST(CachingAllocator, ExpandableSegmentsMapOnlyWhatTheTailLacks) {
  CachingAllocator allocator({.expandable_segments = true});
  const auto a = allocator.allocate(5 * MiB);  // one 20 MiB page; 15 MiB free at the end
  EXPECT_EQ(allocator.stats().reserved, 20 * MiB);
  const auto b = allocator.allocate(30 * MiB);  // the 15 MiB tail plus one more page
  EXPECT_EQ(allocator.stats().reserved, 40 * MiB);
  EXPECT_EQ(allocator.size_of(b), 30 * MiB);  // split to the byte: 5 MiB tail left
  allocator.release(a);
  // Default segments would cudaMalloc 36 MiB here; the expandable one maps 2 pages past its tail.
  allocator.allocate(36 * MiB);
  EXPECT_EQ(allocator.stats().reserved, 80 * MiB);
}

TEST(CachingAllocator, ReleasingWhatIsNotAllocatedIsAnError) {
  CachingAllocator allocator;
  const auto a = allocator.allocate(MiB);
  allocator.release(a);
  EXPECT_THROW(allocator.release(a), InputError);
  EXPECT_THROW(allocator.release(99), InputError);
}

struct Recording {
  const char* name;
  bool expandable;
};

class RecordedHistory : public testing::TestWithParam<Recording> {};

std::string recording_path(const Recording& r) {
  return std::string(STRATSIM_SOURCE_DIR) + "/benchmarks/accuracy/gpu/measured/h200/memory/" + r.name +
         (r.expandable ? "_expandable" : "") + ".json.gz";
}

// PyTorch's memory_stats() at the end of the recorded run (its peaks cover the whole recording).
nlohmann::json recorded_stats(const std::string& path) {
  return nlohmann::json::parse(read_maybe_gzipped_file(path))["stats"];
}

TEST_P(RecordedHistory, ReplayReachesPyTorchsReservedPeak) {
  const std::string path = recording_path(GetParam());
  const std::vector<AllocatorEvent> events = read_allocator_trace(path).events;
  const AllocatorStats stats = replay_allocator_trace(events, {.expandable_segments = GetParam().expandable});
  const nlohmann::json measured = recorded_stats(path);
  EXPECT_EQ(stats.peak_allocated, measured["allocated_bytes.all.peak"].get<std::int64_t>());
  const auto reserved = measured["reserved_bytes.all.peak"].get<std::int64_t>();
  EXPECT_EQ(stats.peak_reserved, reserved);
  // cudaMalloc calls, or page mappings of the expandable segments.
  EXPECT_EQ(stats.segments, measured["num_device_alloc"].get<int>());
}

// Without the driver's addresses (a prediction has none), each new segment above the last: the
// same peaks but where equal-sized free blocks tie differently.
TEST_P(RecordedHistory, WithoutTheDriversAddressesTheReservedPeakIsWithinOnePercent) {
  const std::string path = recording_path(GetParam());
  const AllocatorStats stats =
      replay_allocator_trace(read_allocator_trace(path).events, {.expandable_segments = GetParam().expandable}, false);
  const auto reserved = recorded_stats(path)["reserved_bytes.all.peak"].get<double>();
  EXPECT_NEAR(static_cast<double>(stats.peak_reserved) / reserved, 1.0, 0.01);
}

INSTANTIATE_TEST_SUITE_P(OneH200, RecordedHistory,
                         testing::Values(Recording{"llama2_selective_op", false},
                                         Recording{"llama4_selective_op", false}, Recording{"llama4_none", false},
                                         Recording{"llama4_full", false}, Recording{"llama8_selective_op", false},
                                         Recording{"llama2_selective_op", true}, Recording{"llama4_selective_op", true},
                                         Recording{"llama4_none", true}, Recording{"llama4_full", true},
                                         Recording{"llama8_selective_op", true}),
                         [](const testing::TestParamInfo<Recording>& info) {
                           return std::string(info.param.name) + (info.param.expandable ? "_expandable" : "");
                         });

TEST(CachingAllocator, UnreadableHistoriesNameTheFileAndEntry) {
  EXPECT_THROW(read_allocator_trace(std::string(STRATSIM_TEST_DATA) + "/no-such-file.json"), InputError);
  try {
    replay_allocator_trace({{AllocatorEvent::Action::free, 0x1000, 512, 0}}, {});
    FAIL() << "a free of what was never allocated was accepted";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("0x1000"), std::string::npos) << error.what();
  }
}

// The command: both settings side by side with what PyTorch recorded; bad input exits 2 in one line
// and writes nothing.
TEST(AllocatorCli, ReplaysARecordedHistoryUnderBothSettings) {
  const std::string path = recording_path({"llama4_selective_op", false});
  const test::CliRun text = test::run_cli("allocator " + path, true);
  ASSERT_EQ(text.code, 0) << text.out;
  EXPECT_NE(text.out.find("recorded (PyTorch)           51.13 GiB       65.41 GiB      1.279"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("default segments             51.13 GiB       65.41 GiB      1.279         60"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("expandable segments          51.13 GiB       62.70 GiB"), std::string::npos) << text.out;
  const test::CliRun json = test::run_cli("allocator --json " + path, true);
  ASSERT_EQ(json.code, 0) << json.out;
  const auto result = nlohmann::json::parse(json.out);
  EXPECT_EQ(result["default_segments"]["reserved_peak_bytes"], result["recorded"]["reserved_peak_bytes"]);
  EXPECT_EQ(result["allocations"], 3096);
  EXPECT_FALSE(result["recorded_expandable_segments"].get<bool>());
}

TEST(AllocatorCli, BadHistoriesExitTwoNamingTheEntry) {
  const std::string bad = test::temp_path("bad_history.json"), out = test::temp_path("allocator_out.txt");
  {
    std::ofstream file(bad);
    file << R"({"trace": [["alloc", 4096, 512, 0], ["free_completed", 8192, 512, 0]]})";
  }
  const test::CliRun freed = test::run_cli("allocator " + bad + " -o " + out);
  EXPECT_EQ(freed.code, 2) << freed.out;
  EXPECT_NE(freed.out.find("free of 0x2000, which is not allocated"), std::string::npos) << freed.out;
  EXPECT_FALSE(std::filesystem::exists(out));
  {
    std::ofstream file(bad);
    file << R"({"trace": [["alloc", 4096, -1, 0]]})";
  }
  const test::CliRun negative = test::run_cli("allocator " + bad);
  EXPECT_EQ(negative.code, 2) << negative.out;
  EXPECT_NE(negative.out.find("trace[0]: negative size"), std::string::npos) << negative.out;
  std::filesystem::remove(bad);
}

}  // namespace
}  // namespace stratsim::core
