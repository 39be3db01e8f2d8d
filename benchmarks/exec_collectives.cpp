// Real collectives (Google Benchmark): the same Gloo collective called directly, through our
// Communicator, and as ops of a program run by our executor, with ranks as threads of this
// process over loopback TCP. Reports what nccl-tests reports: time per collective, algbw = n / t
// and busbw = algbw x the kind's factor (GB = 1e9 bytes), n being the all-reduce buffer, the
// all-gather output, the reduce-scatter input, the broadcast buffer.
//
//   BM_Collective/kind:K/bytes:N/ranks:P/path:0  direct: gloo::allreduce & co. on a
//                                                rendezvous::Context, as a user would call them
//                                       path:1  communicator: exec::Communicator::run (argument
//                                                checks, dtype dispatch)
//                                       path:2  executor: exec::execute of a program of back-to-back
//                                                collective ops on one stream (dependency tracking,
//                                                stream thread, timing records)
//
// K: 0 all_reduce, 1 all_gather, 2 reduce_scatter, 3 broadcast. Every case sets up its own
// world (rendezvous outside the timed region). Reduce-scatter constructs Gloo's
// ReduceScatterHalvingDoubling per call in every path (it is the only reduce-scatter this Gloo has).
#include <stdlib.h>

#include <barrier>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include "stratsim/core/run_analysis.hpp"
#include "stratsim/exec/backend.hpp"
#include "stratsim/exec/executor.hpp"

namespace {

using namespace stratsim;
using Clock = std::chrono::steady_clock;
using core::CollectiveKind;

const CollectiveKind kKinds[] = {CollectiveKind::all_reduce, CollectiveKind::all_gather, CollectiveKind::reduce_scatter,
                                 CollectiveKind::broadcast};

// Per rank: input and output sizes for an n-byte collective (nccl-tests conventions).
std::pair<std::size_t, std::size_t> buffer_bytes(CollectiveKind kind, std::size_t n, int p) {
  switch (kind) {
    case CollectiveKind::all_gather:
      return {n / p, n};
    case CollectiveKind::reduce_scatter:
      return {n, n / p};
    default:
      return {n, n};
  }
}

std::string fresh_directory() {
  std::string dir = (std::filesystem::temp_directory_path() / "stratsim-bench-XXXXXX").string();
  ::mkdtemp(dir.data());
  return dir;
}

// Runs `body(rank)` on `ranks` threads and returns rank 0's result.
double on_ranks(int ranks, const std::function<double(int)>& body) {
  std::vector<double> results(ranks);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank) threads.emplace_back([&, rank] { results[rank] = body(rank); });
  for (std::thread& thread : threads) thread.join();
  return results[0];
}

int repetitions(std::size_t bytes) {
  return static_cast<int>(std::clamp<std::size_t>((64u << 20) / std::max<std::size_t>(bytes, 1), 3, 50));
}

void report(benchmark::State& state, CollectiveKind kind, std::size_t n, int p, double seconds_per_collective) {
  state.SetIterationTime(seconds_per_collective);
  const double algbw = static_cast<double>(n) / seconds_per_collective / 1e9;
  state.counters["us"] = seconds_per_collective * 1e6;
  state.counters["algbw_GBps"] = algbw;
  state.counters["busbw_GBps"] = algbw * core::busbw_factor(kind, p);
  state.counters["ranks"] = p;
  state.counters["bytes"] = static_cast<double>(n);
}

// ---- direct Gloo ----------------------------------------------------------------------------

void direct_collective(const std::shared_ptr<gloo::Context>& context, CollectiveKind kind, std::vector<float>& in,
                       std::vector<float>& out, std::uint32_t tag) {
  switch (kind) {
    case CollectiveKind::all_reduce: {
      gloo::AllreduceOptions opts(context);
      opts.setOutput(out.data(), out.size());
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      opts.setTag(tag);
      gloo::allreduce(opts);
      break;
    }
    case CollectiveKind::all_gather: {
      gloo::AllgatherOptions opts(context);
      opts.setInput(in.data(), in.size());
      opts.setOutput(out.data(), out.size());
      opts.setTag(tag);
      gloo::allgather(opts);
      break;
    }
    case CollectiveKind::reduce_scatter: {
      const std::vector<int> blocks(context->size, static_cast<int>(in.size()) / context->size);
      gloo::ReduceScatterHalvingDoubling<float> algorithm(context, {in.data()}, static_cast<int>(in.size()), blocks);
      algorithm.run();
      std::memcpy(out.data(), in.data(), out.size() * sizeof(float));
      break;
    }
    default: {
      gloo::BroadcastOptions opts(context);
      if (context->rank == 0) opts.setInput(out.data(), out.size());
      opts.setOutput(out.data(), out.size());
      opts.setRoot(0);
      opts.setTag(tag);
      gloo::broadcast(opts);
      break;
    }
  }
}

void direct(benchmark::State& state, CollectiveKind kind, std::size_t n, int p) {
  const std::string dir = fresh_directory();
  std::barrier sync(p);
  const int reps = repetitions(n);
  const auto [in_bytes, out_bytes] = buffer_bytes(kind, n, p);
  for (auto _ : state) {
    const double seconds = on_ranks(p, [&](int rank) {
      gloo::rendezvous::FileStore file(dir);
      gloo::rendezvous::PrefixStore store("direct" + std::to_string(state.iterations()), file);
      auto device = gloo::transport::tcp::CreateDevice("127.0.0.1");
      auto context = std::make_shared<gloo::rendezvous::Context>(rank, p);
      context->connectFullMesh(store, device);
      std::vector<float> in(in_bytes / sizeof(float), 1.0f), out(out_bytes / sizeof(float), 1.0f);
      sync.arrive_and_wait();
      const auto start = Clock::now();
      for (int i = 0; i < reps; ++i) direct_collective(context, kind, in, out, static_cast<std::uint32_t>(i));
      return std::chrono::duration<double>(Clock::now() - start).count() / reps;
    });
    report(state, kind, n, p, seconds);
  }
  std::filesystem::remove_all(dir);
}

// ---- through stratsim ------------------------------------------------------------------------

std::unique_ptr<exec::Backend> backend_for(const std::string& dir, const std::string& run, int rank, int p) {
  return exec::make_gloo_backend(exec::parse_rendezvous("file:" + dir, run), rank, p, exec::BackendOptions{});
}

void communicator(benchmark::State& state, CollectiveKind kind, std::size_t n, int p) {
  const std::string dir = fresh_directory();
  std::barrier sync(p);
  const int reps = repetitions(n);
  const auto [in_bytes, out_bytes] = buffer_bytes(kind, n, p);
  for (auto _ : state) {
    const double seconds = on_ranks(p, [&](int rank) {
      auto backend = backend_for(dir, "comm" + std::to_string(state.iterations()), rank, p);
      std::vector<int> members(p);
      for (int r = 0; r < p; ++r) members[r] = r;
      auto comm = backend->communicator("world", members);
      std::vector<std::byte> in(in_bytes), out(out_bytes);
      exec::CollectiveCall call;
      call.kind = kind;
      call.output = out;
      call.input = kind == CollectiveKind::all_reduce || kind == CollectiveKind::broadcast ? call.output
                                                                                           : std::span<std::byte>(in);
      sync.arrive_and_wait();
      const auto start = Clock::now();
      for (int i = 0; i < reps; ++i) {
        call.tag = static_cast<std::uint32_t>(i);
        comm->run(call);
      }
      return std::chrono::duration<double>(Clock::now() - start).count() / reps;
    });
    report(state, kind, n, p, seconds);
  }
  std::filesystem::remove_all(dir);
}

// A program of `reps` back-to-back collectives of `kind` over the world, on one stream.
core::Program collective_program(CollectiveKind kind, std::size_t n, int p, int reps) {
  core::Program program;
  program.mesh = core::DeviceMesh({p}, {"world"});
  program.world_size = p;
  program.iterations = 1;
  program.streams = {"compute", "comm"};
  const auto [in_bytes, out_bytes] = buffer_bytes(kind, n, p);
  for (int i = 0; i < reps; ++i) {
    core::ProgramOp op;
    op.type = core::OpType::collective;
    op.kind = kind;
    op.name = "bench";
    op.group = program.group_id({0});
    op.stream = program.stream_id("comm");
    op.bytes = static_cast<std::int64_t>(n);
    op.input_bytes = static_cast<std::int64_t>(in_bytes);
    op.output_bytes = static_cast<std::int64_t>(out_bytes);
    program.add(op);
  }
  return program;
}

void executor(benchmark::State& state, CollectiveKind kind, std::size_t n, int p) {
  const std::string dir = fresh_directory();
  const int reps = repetitions(n);
  const core::Program program = collective_program(kind, n, p, reps);
  exec::ExecOptions options;
  options.compute = exec::ComputeMode::skip;
  for (auto _ : state) {
    const double seconds = on_ranks(p, [&](int rank) {
      auto backend = backend_for(dir, "exec" + std::to_string(state.iterations()), rank, p);
      const exec::RankRecord record = exec::execute(program, *backend, options);
      return (record.timings.back().end - record.timings.front().start) / reps;
    });
    report(state, kind, n, p, seconds);
  }
  std::filesystem::remove_all(dir);
}

// The three paths of one case run back to back, so the box's drift hits them alike.
void BM_Collective(benchmark::State& state) {
  const CollectiveKind kind = kKinds[state.range(0)];
  const auto n = static_cast<std::size_t>(state.range(1));
  const int p = static_cast<int>(state.range(2));
  switch (state.range(3)) {
    case 0:
      state.SetLabel("direct gloo");
      return direct(state, kind, n, p);
    case 1:
      state.SetLabel("communicator");
      return communicator(state, kind, n, p);
    default:
      state.SetLabel("executor");
      return executor(state, kind, n, p);
  }
}

void cases(benchmark::internal::Benchmark* bench) {
  for (int kind = 0; kind < 4; ++kind)
    for (std::int64_t bytes : {1LL << 10, 1LL << 16, 1LL << 20, 1LL << 24, 1LL << 28})
      for (int ranks : {2, 4, 8})
        for (int path = 0; path < 3; ++path) bench->Args({kind, bytes, ranks, path});
  bench->ArgNames({"kind", "bytes", "ranks", "path"})->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(1);
}
BENCHMARK(BM_Collective)->Apply(cases);

}  // namespace
