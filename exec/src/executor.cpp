// Runs one rank's program: stream threads, dependencies, real collectives, real compute.
#include "stratsim/exec/executor.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "stratsim/core/errors.hpp"

namespace stratsim::exec {
namespace {

using Clock = std::chrono::steady_clock;
using core::OpType;
using core::Program;
using core::ProgramOp;

double seconds_since(Clock::time_point origin) { return std::chrono::duration<double>(Clock::now() - origin).count(); }

// Which group instance, on which stream: one communicator each.
using CommKey = std::tuple<int, int, int>;  // group, instance, stream

class RankExecutor {
 public:
  RankExecutor(const Program& program, Backend& backend, const ExecOptions& options)
      : program_(program), backend_(backend), options_(options), done_(program.ops.size(), 0) {
    record_.rank = backend.rank();
    record_.timings.assign(program.ops.size(), core::OpTiming{});
    record_.algorithms.assign(program.ops.size(), "");
    communicator_of_.assign(program.ops.size(), nullptr);
  }

  RankRecord run() {
    connect_communicators();
    // Stream threads set up their resources (device context, buffers, the compute stream's
    // calibration, which also touches its streamed memory) before the start barrier, so none of
    // that lands in the first iteration's times.
    const int streams = static_cast<int>(program_.streams.size());
    std::vector<std::thread> threads;
    for (int stream = 0; stream < streams; ++stream) threads.emplace_back([this, stream] { run_stream(stream); });
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return ready_ == streams; });
    }
    // A peer that never reaches the barrier throws here: the stream threads are released to
    // return (error_ set) and joined before the error leaves, or their destructors would abort.
    std::exception_ptr failure;
    if (error_.empty()) {
      try {
        backend_.barrier();
      } catch (...) {
        failure = std::current_exception();
      }
    }
    {
      std::lock_guard lock(mutex_);
      origin_ = Clock::now();
      started_ = true;
      if (failure && error_.empty()) error_ = "the start barrier failed";
    }
    changed_.notify_all();
    for (std::thread& thread : threads) thread.join();
    if (failure) std::rethrow_exception(failure);
    if (!error_.empty()) throw CommError(error_);
    record_.wall_seconds = seconds_since(origin_);
    backend_.barrier();
    return std::move(record_);
  }

 private:
  // Before the clock starts, in program order (the same on every member, so rendezvous pair up).
  void connect_communicators() {
    const int rank = backend_.rank();
    for (const ProgramOp& op : program_.ops) {
      if (op.type != OpType::collective) continue;
      const CommKey key{op.group, program_.group_index(op.group, rank), op.stream};
      auto it = communicators_.find(key);
      if (it == communicators_.end()) {
        const std::string name = fmt::format("g{}.i{}.{}", op.group, std::get<1>(key), program_.streams[op.stream]);
        it = communicators_.emplace(key, backend_.communicator(name, program_.group_ranks(op.group, rank))).first;
      }
      communicator_of_[op.id] = it->second.get();
    }
  }

  void run_stream(int stream) {
    std::unique_ptr<StreamResources> resources;
    try {
      resources = backend_.stream_resources();
      if (stream == 0) {
        record_.gemm_flops_per_second = resources->calibrate();
        // Touches the streamed memory too; a run without compute needs neither.
        if (options_.compute != ComputeMode::skip) record_.memory_bytes_per_second = resources->memory_bandwidth();
      }
      if (options_.compute == ComputeMode::gemm)
        for (const ProgramOp& op : program_.ops)
          if (op.stream == stream && shaped(op)) resources->prepare_gemms(op.gemms, op.dtype);
    } catch (const std::exception& error) {
      fail(fmt::format("rank {}: {}", backend_.rank(), error.what()));
    }
    {
      std::unique_lock lock(mutex_);
      ++ready_;
      changed_.notify_all();
      changed_.wait(lock, [&] { return started_; });
      if (!error_.empty()) return;
    }
    try {
      for (const ProgramOp& op : program_.ops) {
        if (op.stream != stream) continue;
        if (!wait_for_dependencies(op)) return;
        core::OpTiming& timing = record_.timings[op.id];
        timing.issue = timing.start = seconds_since(origin_);
        if (op.type == OpType::compute) compute(*resources, op);
        else collective(*resources, op);
        timing.end = seconds_since(origin_);
        finish(op);
      }
    } catch (const std::exception& error) {
      fail(fmt::format("rank {}: {}", backend_.rank(), error.what()));
    }
  }

  bool wait_for_dependencies(const ProgramOp& op) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] {
      return !error_.empty() || std::all_of(op.deps.begin(), op.deps.end(), [&](int dep) { return done_[dep] != 0; });
    });
    return error_.empty();
  }

  void finish(const ProgramOp& op) {
    {
      std::lock_guard lock(mutex_);
      done_[op.id] = 1;
      ++finished_;
      if (options_.on_progress) options_.on_progress(finished_, program_.ops.size());
    }
    changed_.notify_all();
  }

  void fail(const std::string& message) {
    {
      std::lock_guard lock(mutex_);
      if (!error_.empty()) return;
      error_ = message;
    }
    changed_.notify_all();
    if (options_.on_error) options_.on_error(message);
  }

  // A GEMM op runs its own shapes; scaled compute (compute_scale != 1) has no shapes to run.
  bool shaped(const ProgramOp& op) const { return !op.gemms.empty() && options_.compute_scale == 1.0; }

  void compute(StreamResources& resources, const ProgramOp& op) {
    const double flops = op.flops * options_.compute_scale;
    const double bytes = static_cast<double>(op.bytes_accessed) * options_.compute_scale;
    switch (options_.compute) {
      case ComputeMode::gemm:
        if (shaped(op)) resources.compute_gemms(op.gemms, op.dtype);
        else resources.compute(flops, bytes, op.dtype);
        break;
      case ComputeMode::wait: {
        // The roofline of the measured rates: the slower of doing the FLOPs and moving the bytes.
        double seconds = flops / record_.gemm_flops_per_second;
        if (record_.memory_bytes_per_second > 0) seconds = std::max(seconds, bytes / record_.memory_bytes_per_second);
        std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
        break;
      }
      case ComputeMode::skip:
        break;
    }
  }

  void collective(StreamResources& resources, const ProgramOp& op) {
    Communicator& comm = *communicator_of_[op.id];
    CollectiveCall call;
    call.kind = op.kind;
    call.dtype = op.dtype;
    call.output = resources.buffer(1, static_cast<std::size_t>(op.output_bytes));
    call.tag = static_cast<std::uint32_t>(op.id);
    call.input =
        core::runs_in_place(op.kind) ? call.output : resources.buffer(0, static_cast<std::size_t>(op.input_bytes));
    comm.run(call);
    record_.algorithms[op.id] = comm.algorithm(op.kind);
  }

  const Program& program_;
  Backend& backend_;
  const ExecOptions& options_;
  RankRecord record_;
  std::map<CommKey, std::unique_ptr<Communicator>> communicators_;
  std::vector<Communicator*> communicator_of_;  // per op id, resolved once before the clock starts
  Clock::time_point origin_;
  std::mutex mutex_;
  int ready_ = 0;         // stream threads set up and waiting for the start
  bool started_ = false;  // the start barrier passed; origin_ is set
  std::condition_variable changed_;
  std::vector<char> done_;
  std::size_t finished_ = 0;
  std::string error_;
};

}  // namespace

std::optional<ComputeMode> parse_compute_mode(std::string_view text) {
  if (text == "gemm") return ComputeMode::gemm;
  if (text == "wait") return ComputeMode::wait;
  if (text == "skip") return ComputeMode::skip;
  return std::nullopt;
}

std::string_view compute_mode_name(ComputeMode mode) {
  switch (mode) {
    case ComputeMode::gemm:
      return "gemm";
    case ComputeMode::wait:
      return "wait";
    case ComputeMode::skip:
      return "skip";
  }
  return "?";
}

RankRecord execute(const Program& program, Backend& backend, const ExecOptions& options) {
  if (backend.world_size() != program.world_size)
    throw core::InputError(
        fmt::format("the plan needs {} ranks but the backend has {}", program.world_size, backend.world_size()));
  return RankExecutor(program, backend, options).run();
}

std::string encode(const RankRecord& record) {
  nlohmann::json doc;
  doc["rank"] = record.rank;
  doc["gemm_flops_per_second"] = record.gemm_flops_per_second;
  doc["memory_bytes_per_second"] = record.memory_bytes_per_second;
  doc["wall_seconds"] = record.wall_seconds;
  nlohmann::json timings = nlohmann::json::array();
  for (const core::OpTiming& t : record.timings) timings.push_back({t.issue, t.start, t.end});
  doc["timings"] = std::move(timings);
  doc["algorithms"] = record.algorithms;
  return doc.dump();
}

RankRecord decode_record(const std::string& text) {
  const nlohmann::json doc = nlohmann::json::parse(text);
  RankRecord record;
  record.rank = doc.at("rank").get<int>();
  record.gemm_flops_per_second = doc.at("gemm_flops_per_second").get<double>();
  record.memory_bytes_per_second = doc.value("memory_bytes_per_second", 0.0);
  record.wall_seconds = doc.at("wall_seconds").get<double>();
  for (const auto& t : doc.at("timings"))
    record.timings.push_back({t.at(0).get<double>(), t.at(1).get<double>(), t.at(2).get<double>()});
  record.algorithms = doc.at("algorithms").get<std::vector<std::string>>();
  return record;
}

}  // namespace stratsim::exec
