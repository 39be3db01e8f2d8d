// The Gloo backend: TCP pairs between rank processes, rendezvous through Gloo's FileStore or
// RedisStore, one Gloo context per communicator (Gloo has no group split; each sub-group gets its
// own context under its own store prefix, as ecosystem.md 1.2 recommends).
//
// Why each choice:
//   * Every store access goes through TimeoutStore: Debian's Gloo (5b14351) FileStore::get waits
//     with a fixed 30 s, whatever the context timeout, so a missing peer would otherwise take 31 s
//     to surface instead of the configured timeout.
//   * Keys are scoped by the run id, so a rerun on the same directory or Redis never reads a dead
//     run's addresses as live peers.
//   * Collectives are Gloo's options-style calls with the configured timeout; reduce-scatter
//     exists only as the legacy ReduceScatterHalvingDoubling class in this Gloo, whose
//     constructor takes context slots, so a communicator is used by one thread only (the
//     executor creates one per group instance and stream).
#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/redis_store.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

#include "host_resources.hpp"
#include "stratsim/core/errors.hpp"
#include "stratsim/exec/backend.hpp"

namespace stratsim::exec {
namespace {

using gloo::rendezvous::Store;

// Every wait bounded by the timeout and, while a group connects, by one deadline for the whole
// connection: connecting takes several waits in turn (the peers' addresses, then whether each
// connected), and a peer that stopped would otherwise cost a full timeout at each of them.
class TimeoutStore : public Store {
 public:
  using Clock = std::chrono::steady_clock;

  TimeoutStore(std::unique_ptr<Store> base, std::chrono::milliseconds timeout)
      : base_(std::move(base)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override { base_->set(key, data); }
  std::vector<char> get(const std::string& key) override {
    base_->wait({key}, bound(timeout_));
    return base_->get(key);
  }
  void wait(const std::vector<std::string>& keys) override { base_->wait(keys, bound(timeout_)); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    base_->wait(keys, bound(timeout));
  }

  // Until cleared, no wait goes past `deadline`.
  void set_deadline(std::optional<Clock::time_point> deadline) { deadline_ = deadline; }

 private:
  std::chrono::milliseconds bound(std::chrono::milliseconds timeout) const {
    timeout = std::max(std::min(timeout, timeout_), std::chrono::milliseconds(1));
    if (!deadline_) return timeout;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline_ - Clock::now());
    return std::clamp(left, std::chrono::milliseconds(1), timeout);  // past it: one last look
  }

  std::unique_ptr<Store> base_;
  std::chrono::milliseconds timeout_;
  std::optional<Clock::time_point> deadline_;
};

// The deadline of one group's connection, cleared however the connection ends.
class ConnectDeadline {
 public:
  ConnectDeadline(TimeoutStore& store, std::chrono::milliseconds timeout) : store_(store) {
    store_.set_deadline(TimeoutStore::Clock::now() + timeout);
  }
  ~ConnectDeadline() { store_.set_deadline(std::nullopt); }
  ConnectDeadline(const ConnectDeadline&) = delete;
  ConnectDeadline& operator=(const ConnectDeadline&) = delete;

 private:
  TimeoutStore& store_;
};

std::unique_ptr<Store> open_store(const Rendezvous& rendezvous) {
  if (rendezvous.kind == Rendezvous::Kind::redis)
    return std::make_unique<gloo::rendezvous::RedisStore>(rendezvous.host, rendezvous.port);
  return std::make_unique<gloo::rendezvous::FileStore>(rendezvous.path);
}

// Runs a Gloo call, turning its exceptions into CommError with what was being done.
template <typename Fn>
void guarded(const std::string& what, Fn&& fn) {
  try {
    fn();
  } catch (const gloo::Exception& error) {
    throw CommError(fmt::format("{}: {}", what, error.what()));
  } catch (const gloo::EnforceNotMet& error) {
    throw CommError(fmt::format("{}: {}", what, error.what()));
  }
}

// The element type Gloo reduces a dtype as. bfloat16 has no Gloo type in this version: it is
// reduced as float16 (same bytes on the wire, so timings hold; --train runs float32).
template <typename Visitor>
void with_element_type(core::DType dtype, Visitor&& visit) {
  switch (dtype) {
    case core::DType::float32:
      return visit(float{});
    case core::DType::float64:
      return visit(double{});
    case core::DType::float16:
    case core::DType::bfloat16:
      return visit(gloo::float16{});
    case core::DType::int32:
      return visit(std::int32_t{});
    case core::DType::int64:
      return visit(std::int64_t{});
    case core::DType::int8:
      return visit(std::int8_t{});
    case core::DType::uint8:
    case core::DType::bool_:
      return visit(std::uint8_t{});
  }
}

template <typename T>
T* typed(std::span<std::byte> bytes) {
  return reinterpret_cast<T*>(bytes.data());
}

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::Context> context, std::string key, std::chrono::milliseconds timeout)
      : context_(std::move(context)), key_(std::move(key)), timeout_(timeout) {}

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }

  std::string algorithm(core::CollectiveKind kind) const override {
    switch (kind) {
      case core::CollectiveKind::all_reduce:
        return "gloo ring";
      case core::CollectiveKind::all_gather:
        return "gloo ring";
      case core::CollectiveKind::reduce_scatter:
        return "gloo halving-doubling";
      case core::CollectiveKind::broadcast:
        return "gloo one-to-all";
      case core::CollectiveKind::all_to_all:
        return "gloo pairwise";
      case core::CollectiveKind::scatter:
        return "gloo one-to-all";
    }
    return "gloo";
  }

  void run(const CollectiveCall& call) override {
    check_sizes(call);
    const std::string what =
        fmt::format("{} on group {} (rank {} of {})", core::collective_kind_name(call.kind), key_, rank(), size());
    if (size() == 1) return run_alone(call);
    with_element_type(call.dtype, [&](auto element) {
      using T = decltype(element);
      guarded(what, [&] { dispatch<T>(call); });
    });
  }

 private:
  void check_sizes(const CollectiveCall& call) const {
    const std::size_t in = call.input.size(), out = call.output.size(), p = static_cast<std::size_t>(size());
    const std::size_t element = static_cast<std::size_t>(core::dtype_size(call.dtype));
    bool ok = in % element == 0 && out % element == 0;
    switch (call.kind) {
      case core::CollectiveKind::all_reduce:
      case core::CollectiveKind::broadcast:
        ok = ok && in == out;
        break;
      case core::CollectiveKind::all_gather:
        ok = ok && out == in * p;
        break;
      case core::CollectiveKind::reduce_scatter:
      case core::CollectiveKind::scatter:  // every rank passes the root's whole buffer's size
        ok = ok && in == out * p;
        break;
      case core::CollectiveKind::all_to_all:
        ok = ok && in == out && (in / element) % p == 0;
        break;
    }
    if (!ok)
      throw core::InputError(fmt::format("{} on group {}: buffers of {} and {} bytes do not fit {} ranks of {}",
                                         core::collective_kind_name(call.kind), key_, in, out, p,
                                         core::dtype_name(call.dtype)));
  }

  // A group of one: nothing to exchange; the output is the input.
  static void run_alone(const CollectiveCall& call) {
    if (call.output.data() != call.input.data() && !call.input.empty())
      std::memcpy(call.output.data(), call.input.data(), std::min(call.input.size(), call.output.size()));
  }

  template <typename T>
  void dispatch(const CollectiveCall& call) {
    const std::size_t elements_in = call.input.size() / sizeof(T), elements_out = call.output.size() / sizeof(T);
    switch (call.kind) {
      case core::CollectiveKind::all_reduce: {
        gloo::AllreduceOptions opts(context_);
        opts.setOutput(typed<T>(call.output), elements_out);
        opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
        opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<T>));
        opts.setTag(call.tag);
        opts.setTimeout(timeout_);
        gloo::allreduce(opts);
        break;
      }
      case core::CollectiveKind::all_gather: {
        gloo::AllgatherOptions opts(context_);
        opts.setInput(typed<T>(call.input), elements_in);
        opts.setOutput(typed<T>(call.output), elements_out);
        opts.setTag(call.tag);
        opts.setTimeout(timeout_);
        gloo::allgather(opts);
        break;
      }
      case core::CollectiveKind::reduce_scatter:
        reduce_scatter<T>(call, elements_in);
        break;
      case core::CollectiveKind::broadcast: {
        gloo::BroadcastOptions opts(context_);
        if (rank() == call.root) opts.setInput(typed<T>(call.input), elements_in);
        opts.setOutput(typed<T>(call.output), elements_out);
        opts.setRoot(call.root);
        opts.setTag(call.tag);
        opts.setTimeout(timeout_);
        gloo::broadcast(opts);
        break;
      }
      case core::CollectiveKind::all_to_all: {
        gloo::AlltoallOptions opts(context_);
        opts.setInput(typed<T>(call.input), elements_in);
        opts.setOutput(typed<T>(call.output), elements_out);
        opts.setTag(call.tag);
        opts.setTimeout(timeout_);
        gloo::alltoall(opts);
        break;
      }
      case core::CollectiveKind::scatter: {
        // The root sends chunk k of its buffer to rank k; the others only receive.
        gloo::ScatterOptions opts(context_);
        std::vector<T*> chunks;
        if (rank() == call.root)
          for (int k = 0; k < size(); ++k) chunks.push_back(typed<T>(call.input) + k * elements_out);
        if (rank() == call.root) opts.setInputs(chunks, elements_out);
        opts.setOutput(typed<T>(call.output), elements_out);
        opts.setRoot(call.root);
        opts.setTag(call.tag);
        opts.setTimeout(timeout_);
        gloo::scatter(opts);
        break;
      }
    }
  }

  // This Gloo's only reduce-scatter works in place over the whole input and leaves this rank's
  // reduced block at the start of it; copy that out. Equal blocks (the program pads shards).
  template <typename T>
  void reduce_scatter(const CollectiveCall& call, std::size_t elements) {
    if (elements > static_cast<std::size_t>(std::numeric_limits<int>::max()))
      throw core::InputError(
          fmt::format("reduce_scatter on group {}: {} elements exceed Gloo's int count", key_, elements));
    const int count = static_cast<int>(elements);
    const std::vector<int> blocks(size(), count / size());
    context_->setTimeout(timeout_);
    gloo::ReduceScatterHalvingDoubling<T> algorithm(context_, {typed<T>(call.input)}, count, blocks);
    algorithm.run();
    std::memcpy(call.output.data(), call.input.data(), call.output.size());
  }

  std::shared_ptr<gloo::Context> context_;
  std::string key_;
  std::chrono::milliseconds timeout_;
};

class GlooBackend : public Backend {
 public:
  GlooBackend(const Rendezvous& rendezvous, int rank, int world_size, const BackendOptions& options)
      : rank_(rank), world_size_(world_size), options_(options) {
    guarded(fmt::format("rank {}: rendezvous through {}", rank, describe(rendezvous)), [&] {
      store_ = std::make_unique<TimeoutStore>(open_store(rendezvous), options.timeout);
      scoped_ = std::make_unique<gloo::rendezvous::PrefixStore>(rendezvous.run_id, *store_);
      check_bind_address(options.bind_address);
      gloo::transport::tcp::attr attr;
      attr.hostname = options.bind_address;
      device_ = gloo::transport::tcp::CreateDevice(attr);
    });
    std::vector<int> everyone(world_size);
    for (int r = 0; r < world_size; ++r) everyone[r] = r;
    world_ = connect("world", everyone);
  }

  std::string name() const override { return "gloo"; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }

  std::unique_ptr<Communicator> communicator(const std::string& key, const std::vector<int>& members) override {
    return std::make_unique<GlooCommunicator>(connect("comm/" + key, members), key, options_.timeout);
  }

  std::unique_ptr<StreamResources> stream_resources() override { return detail::make_host_resources(); }

  void barrier() override {
    if (world_size_ == 1) return;
    guarded(fmt::format("rank {}: barrier", rank_), [&] {
      gloo::BarrierOptions opts(world_);
      opts.setTimeout(options_.timeout);
      gloo::barrier(opts);
    });
  }

  void publish(const std::string& key, const std::string& value) override {
    guarded("publishing " + key, [&] { scoped_->set("kv/" + key, std::vector<char>(value.begin(), value.end())); });
  }

  std::string fetch(const std::string& key) override {
    std::string value;
    guarded("waiting for " + key, [&] {
      const std::vector<char> data = scoped_->get("kv/" + key);
      value.assign(data.begin(), data.end());
    });
    return value;
  }

 private:
  // Gloo 5b14351's connectFullMesh now and then fails on one side only ("Connection closed by
  // peer" while the other side believes it is connected; seen a few times in a hundred under
  // ASan). So every member posts whether it connected, and unless all did, all retry under a
  // fresh prefix. A dead peer never posts: waiting for its status times out like any rendezvous.
  std::shared_ptr<gloo::Context> connect(const std::string& key, const std::vector<int>& members) {
    const auto me = std::find(members.begin(), members.end(), rank_);
    if (me == members.end()) throw core::InputError(fmt::format("rank {} is not a member of group {}", rank_, key));
    const int index = static_cast<int>(me - members.begin()), size = static_cast<int>(members.size());
    const std::string what = fmt::format("rank {}: connecting group {} ({} ranks)", rank_, key, size);
    std::string failure;
    for (int attempt = 0; attempt < kConnectAttempts; ++attempt) {
      // One deadline per attempt: a stopped peer never posts its status, so the first attempt
      // fails for good within the timeout; a retry comes only after every member posted.
      const ConnectDeadline deadline(*store_, options_.timeout);
      auto context = std::make_shared<gloo::rendezvous::Context>(index, size);
      context->setTimeout(options_.timeout);
      if (size == 1) return context;
      const std::string prefix = fmt::format("{}#{}", key, attempt);
      failure.clear();
      try {
        gloo::rendezvous::PrefixStore store(prefix, *scoped_);
        context->connectFullMesh(store, device_);
      } catch (const gloo::IoException& error) {
        failure = error.what();
      }
      if (everyone_connected(prefix, members, failure.empty(), what)) return context;
      if (failure.empty()) failure = "a peer failed to connect";
    }
    throw CommError(fmt::format("{}: {} (after {} attempts)", what, failure, kConnectAttempts));
  }

  bool everyone_connected(const std::string& prefix, const std::vector<int>& members, bool connected,
                          const std::string& what) {
    bool all = connected;
    guarded(what, [&] {
      scoped_->set(fmt::format("{}/connected/{}", prefix, rank_), std::vector<char>{connected ? '1' : '0'});
      for (int member : members) {
        const std::vector<char> status = scoped_->get(fmt::format("{}/connected/{}", prefix, member));
        all = all && !status.empty() && status.front() == '1';
      }
    });
    return all;
  }

  static constexpr int kConnectAttempts = 3;
  int rank_, world_size_;
  BackendOptions options_;
  std::unique_ptr<TimeoutStore> store_;
  std::unique_ptr<Store> scoped_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> world_;
};

}  // namespace

std::unique_ptr<Backend> make_gloo_backend(const Rendezvous& rendezvous, int rank, int world_size,
                                           const BackendOptions& options) {
  return std::make_unique<GlooBackend>(rendezvous, rank, world_size, options);
}

}  // namespace stratsim::exec
