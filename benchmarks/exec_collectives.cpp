// Real collectives (Google Benchmark): the same Gloo collective called directly and through
// stratsim, with ranks as threads of this process over loopback TCP. Reports what nccl-tests
// reports: time per collective, algbw = n / t and busbw = algbw x the kind's factor (GB = 1e9
// bytes), n being the all-reduce buffer, the all-gather output, the reduce-scatter input, the
// broadcast buffer.
//
//   BM_Communicator/kind:K/bytes:N/ranks:P  direct gloo::allreduce & co. on a rendezvous::Context
//        (as a user would call them) against exec::Communicator::run, in one world, alternating
//        blocks of 5 calls so the box's drift hits both alike; medians of the per-call times.
//   BM_Executor/kind:K/bytes:N/ranks:P      direct calls against exec::execute running a program
//        of back-to-back collective ops on one stream (stream thread, dependency tracking, timing
//        records), direct loops before and after the program; medians.
//
// Counters: direct_us, stratsim_us (medians per collective), overhead = stratsim / direct - 1,
// algbw/busbw of the stratsim path. K: 0 all_reduce, 1 all_gather, 2 reduce_scatter, 3 broadcast.
// Rendezvous and warm-up calls are outside the timed region. Reduce-scatter constructs Gloo's
// ReduceScatterHalvingDoubling per call in both paths (the only reduce-scatter this Gloo has).
// The box running them is noisy (2 vCPUs for up to 8 ranks and Gloo's I/O threads): read the
// medians, and repeat with --benchmark_repetitions.
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

int repetitions(std::size_t bytes) {
  return static_cast<int>(std::clamp<std::size_t>((64u << 20) / std::max<std::size_t>(bytes, 1), 3, 50));
}

// Untimed collectives first, as nccl-tests does: fresh TCP connections start slow and the
// buffers' pages fault in on first touch.
int warmups(std::size_t bytes) { return std::max(2, repetitions(bytes) / 4); }

double median(std::vector<double> values) {
  std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
  return values[values.size() / 2];
}

// Rank 0's per-call times of both paths.
struct Paired {
  std::vector<double> direct, ours;
};

void report(benchmark::State& state, CollectiveKind kind, std::size_t n, int p, const Paired& times) {
  const double direct = median(times.direct), ours = median(times.ours);
  state.SetIterationTime(ours);
  const double algbw = static_cast<double>(n) / ours / 1e9;
  state.counters["direct_us"] = direct * 1e6;
  state.counters["stratsim_us"] = ours * 1e6;
  state.counters["overhead"] = ours / direct - 1;
  state.counters["algbw_GBps"] = algbw;
  state.counters["busbw_GBps"] = algbw * core::busbw_factor(kind, p);
  state.counters["ranks"] = p;
  state.counters["bytes"] = static_cast<double>(n);
}

double seconds_of(const std::function<void()>& call) {
  const auto start = Clock::now();
  call();
  return std::chrono::duration<double>(Clock::now() - start).count();
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

// One rank of a benchmark world: a raw Gloo context for the direct path and a stratsim backend.
struct RankWorld {
  std::shared_ptr<gloo::Context> context;
  std::unique_ptr<exec::Backend> backend;
  std::vector<float> in, out;

  RankWorld(const std::string& dir, int rank, int p, CollectiveKind kind, std::size_t n) {
    gloo::rendezvous::FileStore file(dir);
    gloo::rendezvous::PrefixStore store("direct", file);
    auto device = gloo::transport::tcp::CreateDevice("127.0.0.1");
    auto rendezvous = std::make_shared<gloo::rendezvous::Context>(rank, p);
    rendezvous->connectFullMesh(store, device);
    context = rendezvous;
    backend =
        exec::make_gloo_backend(exec::parse_rendezvous("file:" + dir, "stratsim"), rank, p, exec::BackendOptions{});
    const auto [in_bytes, out_bytes] = buffer_bytes(kind, n, p);
    in.assign(in_bytes / sizeof(float), 1.0f);
    out.assign(out_bytes / sizeof(float), 1.0f);
  }

  void direct(CollectiveKind kind, std::uint32_t tag) { direct_collective(context, kind, in, out, tag); }
};

std::vector<int> everyone(int p) {
  std::vector<int> members(p);
  for (int r = 0; r < p; ++r) members[r] = r;
  return members;
}

// Runs `body(world)` on p rank threads; returns rank 0's times.
Paired on_ranks(int p, CollectiveKind kind, std::size_t n, const std::function<Paired(RankWorld&)>& body) {
  const std::string dir = fresh_directory();
  std::vector<Paired> results(p);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < p; ++rank)
    threads.emplace_back([&, rank] {
      RankWorld world(dir, rank, p, kind, n);
      results[rank] = body(world);
      world.backend->barrier();
    });
  for (std::thread& thread : threads) thread.join();
  std::filesystem::remove_all(dir);
  return results[0];
}

void BM_Communicator(benchmark::State& state) {
  const CollectiveKind kind = kKinds[state.range(0)];
  const auto n = static_cast<std::size_t>(state.range(1));
  const int p = static_cast<int>(state.range(2));
  const int reps = repetitions(n);
  for (auto _ : state) {
    const Paired times = on_ranks(p, kind, n, [&](RankWorld& world) {
      auto comm = world.backend->communicator("world", everyone(p));
      exec::CollectiveCall call;
      call.kind = kind;
      call.output = std::as_writable_bytes(std::span(world.out));
      const bool in_place = kind == CollectiveKind::all_reduce || kind == CollectiveKind::broadcast;
      call.input = in_place ? call.output : std::as_writable_bytes(std::span(world.in));
      Paired times;
      for (int i = 0; i < warmups(n); ++i) {
        call.tag = static_cast<std::uint32_t>(i);
        world.direct(kind, call.tag);
        comm->run(call);
      }
      // Blocks of calls, alternating which path goes first: switching connections on every call
      // costs the second call of each pair on this box, whichever path it is.
      const int block = 5;
      for (int first = 0; first < reps; first += block) {
        const bool direct_first = (first / block) % 2 == 0;
        for (int path = 0; path < 2; ++path) {
          const bool direct = (path == 0) == direct_first;
          for (int i = first; i < std::min(reps, first + block); ++i) {
            call.tag = static_cast<std::uint32_t>(i);
            if (direct) times.direct.push_back(seconds_of([&] { world.direct(kind, call.tag); }));
            else times.ours.push_back(seconds_of([&] { comm->run(call); }));
          }
        }
      }
      return times;
    });
    report(state, kind, n, p, times);
  }
}

// A program of `count` back-to-back collectives of `kind` over the world, on one stream.
core::Program collective_program(CollectiveKind kind, std::size_t n, int p, int count) {
  core::Program program;
  program.mesh = core::DeviceMesh({p}, {"world"});
  program.world_size = p;
  program.iterations = 1;
  program.streams = {"compute", "comm"};
  const auto [in_bytes, out_bytes] = buffer_bytes(kind, n, p);
  for (int i = 0; i < count; ++i) {
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

void BM_Executor(benchmark::State& state) {
  const CollectiveKind kind = kKinds[state.range(0)];
  const auto n = static_cast<std::size_t>(state.range(1));
  const int p = static_cast<int>(state.range(2));
  const int reps = repetitions(n), warm = warmups(n);
  const core::Program program = collective_program(kind, n, p, warm + reps);
  exec::ExecOptions options;
  options.compute = exec::ComputeMode::skip;
  for (auto _ : state) {
    const Paired times = on_ranks(p, kind, n, [&](RankWorld& world) {
      Paired times;
      const auto direct_loop = [&](int count) {
        for (int i = 0; i < warm; ++i) world.direct(kind, static_cast<std::uint32_t>(i));
        for (int i = 0; i < count; ++i)
          times.direct.push_back(seconds_of([&] { world.direct(kind, static_cast<std::uint32_t>(i)); }));
      };
      direct_loop(reps / 2 + 1);
      const exec::RankRecord record = exec::execute(program, *world.backend, options);
      for (int i = warm; i < warm + reps; ++i) times.ours.push_back(record.timings[i].end - record.timings[i].start);
      direct_loop(reps / 2 + 1);
      return times;
    });
    report(state, kind, n, p, times);
  }
}

void cases(benchmark::internal::Benchmark* bench) {
  for (int kind = 0; kind < 4; ++kind)
    for (std::int64_t bytes : {1LL << 10, 1LL << 16, 1LL << 20, 1LL << 24, 1LL << 28})
      for (int ranks : {2, 4, 8}) bench->Args({kind, bytes, ranks});
  bench->ArgNames({"kind", "bytes", "ranks"})->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(1);
}
BENCHMARK(BM_Communicator)->Apply(cases);
BENCHMARK(BM_Executor)->Apply(cases);

}  // namespace
