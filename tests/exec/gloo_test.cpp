// The Gloo backend with ranks as threads of one process (as Gloo's own tests do), meeting through
// a FileStore in a fresh directory: every collective's values on sub-groups of a 2-D mesh, groups
// of one, the store, and a peer that never shows up.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "stratsim/core/errors.hpp"
#include "stratsim/exec/backend.hpp"

namespace stratsim::test {
namespace {

using core::CollectiveKind;
using exec::CollectiveCall;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "stratsim-gloo-test-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs `body(rank, backend)` on `world` threads; returns the first failure message, if any.
std::string run_ranks(int world, const std::function<void(int, exec::Backend&)>& body,
                      std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  TempDir dir;
  std::vector<std::thread> threads;
  std::vector<std::string> errors(world);
  for (int rank = 0; rank < world; ++rank)
    threads.emplace_back([&, rank] {
      try {
        exec::BackendOptions options;
        options.timeout = timeout;
        auto backend =
            exec::make_gloo_backend(exec::parse_rendezvous("file:" + dir.path(), "test"), rank, world, options);
        body(rank, *backend);
        backend->barrier();  // no rank tears its sockets down while a peer still uses them
      } catch (const std::exception& error) {
        errors[rank] = error.what();
      }
    });
  for (std::thread& thread : threads) thread.join();
  std::string all;
  for (int rank = 0; rank < world; ++rank)
    if (!errors[rank].empty()) all += (all.empty() ? "" : "; ") + errors[rank];
  return all;
}

std::span<std::byte> bytes(std::vector<float>& values) { return std::as_writable_bytes(std::span(values)); }

CollectiveCall call(CollectiveKind kind, std::vector<float>& input, std::vector<float>& output, std::uint32_t tag) {
  CollectiveCall c;
  c.kind = kind;
  c.dtype = core::DType::float32;
  c.input = bytes(input);
  c.output = bytes(output);
  c.tag = tag;
  return c;
}

// A 2 x 3 mesh: rows are "dp" groups of 3 ({0,1,2}, {3,4,5}), columns "tp" groups of 2.
std::vector<int> row_of(int rank) { return rank < 3 ? std::vector<int>{0, 1, 2} : std::vector<int>{3, 4, 5}; }
std::vector<int> column_of(int rank) { return {rank % 3, rank % 3 + 3}; }

TEST(GlooBackend, CollectivesOnSubGroupsGiveTheRightValues) {
  const std::string error = run_ranks(6, [](int rank, exec::Backend& backend) {
    const std::vector<int> row = row_of(rank), column = column_of(rank);
    auto dp = backend.communicator(rank < 3 ? "row0" : "row1", row);
    auto tp = backend.communicator("col" + std::to_string(rank % 3), column);
    const int r = dp->rank(), p = dp->size();
    ASSERT_EQ(p, 3);
    ASSERT_EQ(tp->size(), 2);

    // all_reduce in place over the row: sum of the members' ranks.
    std::vector<float> sum(5, static_cast<float>(rank));
    dp->run(call(CollectiveKind::all_reduce, sum, sum, 1));
    const float row_sum = static_cast<float>(row[0] + row[1] + row[2]);
    for (float v : sum) EXPECT_EQ(v, row_sum);

    // all_gather: member i's shard is {10 i, 10 i + 1}.
    std::vector<float> shard = {10.0f * r, 10.0f * r + 1}, gathered(2 * p);
    dp->run(call(CollectiveKind::all_gather, shard, gathered, 2));
    for (int i = 0; i < p; ++i) {
      EXPECT_EQ(gathered[2 * i], 10.0f * i);
      EXPECT_EQ(gathered[2 * i + 1], 10.0f * i + 1);
    }

    // reduce_scatter: input element j = j + member; member r keeps block r summed over members.
    std::vector<float> input(4 * p), block(4);
    for (int j = 0; j < 4 * p; ++j) input[j] = static_cast<float>(j + r);
    dp->run(call(CollectiveKind::reduce_scatter, input, block, 3));
    for (int j = 0; j < 4; ++j) EXPECT_EQ(block[j], static_cast<float>(p * (4 * r + j) + 0 + 1 + 2)) << "j=" << j;

    // broadcast from group rank 1 of the column.
    std::vector<float> payload(7, tp->rank() == 1 ? 42.0f : -1.0f);
    exec::CollectiveCall b = call(CollectiveKind::broadcast, payload, payload, 4);
    b.root = 1;
    tp->run(b);
    for (float v : payload) EXPECT_EQ(v, 42.0f);

    // all_to_all: block k of member i carries 100 i + k; member r receives 100 i + r from each i.
    std::vector<float> out_blocks(3 * 2), in_blocks(3 * 2);
    for (int k = 0; k < 3; ++k) out_blocks[2 * k] = out_blocks[2 * k + 1] = static_cast<float>(100 * r + k);
    dp->run(call(CollectiveKind::all_to_all, out_blocks, in_blocks, 5));
    for (int i = 0; i < 3; ++i) EXPECT_EQ(in_blocks[2 * i], static_cast<float>(100 * i + r));

    // scatter from the row's first rank: member k receives block k = {1000 + 3 k, +1, +2}; only the
    // root's buffer is read.
    std::vector<float> whole(3 * p, -7.0f), mine(3);
    if (r == 0)
      for (int j = 0; j < 3 * p; ++j) whole[j] = static_cast<float>(1000 + j);
    dp->run(call(CollectiveKind::scatter, whole, mine, 6));
    for (int j = 0; j < 3; ++j) EXPECT_EQ(mine[j], static_cast<float>(1000 + 3 * r + j));

    EXPECT_EQ(dp->algorithm(CollectiveKind::reduce_scatter), "gloo halving-doubling");
    backend.barrier();
  });
  EXPECT_EQ(error, "");
}

TEST(GlooBackend, GroupsOfOneCopyAndTheStoreCarriesValues) {
  const std::string error = run_ranks(2, [](int rank, exec::Backend& backend) {
    auto alone = backend.communicator("self" + std::to_string(rank), {rank});
    std::vector<float> shard = {1, 2}, gathered(2);
    alone->run(call(CollectiveKind::all_gather, shard, gathered, 0));
    EXPECT_EQ(gathered, shard);
    backend.publish("hello/" + std::to_string(rank), "from " + std::to_string(rank));
    EXPECT_EQ(backend.fetch("hello/" + std::to_string(1 - rank)), "from " + std::to_string(1 - rank));
  });
  EXPECT_EQ(error, "");
}

TEST(GlooBackend, BuffersThatDoNotFitAreRejected) {
  const std::string error = run_ranks(2, [](int, exec::Backend& backend) {
    auto world = backend.communicator("w", {0, 1});
    std::vector<float> shard(3), gathered(5);
    EXPECT_THROW(world->run(call(CollectiveKind::all_gather, shard, gathered, 0)), core::InputError);
  });
  EXPECT_EQ(error, "");
}

// Rank 1 never starts: rank 0 must give up within about the timeout, with a CommError naming
// what it waited for, not hang and not take FileStore's fixed 30 s.
TEST(GlooBackend, AMissingPeerFailsWithinTheTimeout) {
  TempDir dir;
  exec::BackendOptions options;
  options.timeout = std::chrono::milliseconds(1500);
  const auto start = std::chrono::steady_clock::now();
  try {
    exec::make_gloo_backend(exec::parse_rendezvous("file:" + dir.path(), "lonely"), 0, 2, options);
    FAIL() << "rendezvous with a missing peer succeeded";
  } catch (const exec::CommError& error) {
    EXPECT_NE(std::string(error.what()).find("rank 0"), std::string::npos) << error.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(Rendezvous, SpecsParseAndBadOnesFail) {
  const exec::Rendezvous file = exec::parse_rendezvous("file:/shared/x", "r1");
  EXPECT_EQ(file.kind, exec::Rendezvous::Kind::file);
  EXPECT_EQ(file.path, "/shared/x");
  const exec::Rendezvous redis = exec::parse_rendezvous("redis://10.0.0.5:7000", "r1");
  EXPECT_EQ(redis.kind, exec::Rendezvous::Kind::redis);
  EXPECT_EQ(redis.host, "10.0.0.5");
  EXPECT_EQ(redis.port, 7000);
  EXPECT_EQ(exec::parse_rendezvous("redis:head", "r1").port, 6379);
  EXPECT_THROW(exec::parse_rendezvous("tcp://x:1", "r1"), core::InputError);
  EXPECT_THROW(exec::parse_rendezvous("redis://x:99999", "r1"), core::InputError);
  EXPECT_THROW(exec::parse_rendezvous("file:", "r1"), core::InputError);
  EXPECT_THROW(exec::parse_rendezvous("file:/x", "a/b"), core::InputError);
}

}  // namespace
}  // namespace stratsim::test
