// The binary form of SimResult that crosses the pipe from the simulation process: native-endian
// integers and doubles, length-prefixed strings and arrays, the producer's JSON extra as its text.
// Both ends are the same binary, so no portability is needed, only speed (full-mode results hold
// millions of timings). Everything but wall_seconds, which the parent measures, makes the trip.
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "engine.hpp"

namespace stratsim::sim::detail {
namespace {

class Writer {
 public:
  template <typename T>
  void scalar(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&value), sizeof value);
  }
  void text(const std::string& value) {
    scalar<std::uint64_t>(value.size());
    out_.append(value);
  }
  void texts(const std::vector<std::string>& values) {
    scalar<std::uint64_t>(values.size());
    for (const std::string& value : values) text(value);
  }
  template <typename T>
  void array(const std::vector<T>& values) {
    static_assert(std::is_trivially_copyable_v<T>);
    scalar<std::uint64_t>(values.size());
    out_.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  template <typename T>
  T scalar() {
    T value;
    need(sizeof value);
    std::memcpy(&value, in_.data() + at_, sizeof value);
    at_ += sizeof value;
    return value;
  }
  std::string text() {
    const auto size = scalar<std::uint64_t>();
    need(size);
    std::string value = in_.substr(at_, size);
    at_ += size;
    return value;
  }
  std::vector<std::string> texts() {
    const auto size = scalar<std::uint64_t>();
    need(size * sizeof(std::uint64_t));  // each one holds at least its length
    std::vector<std::string> values;
    values.reserve(size);
    for (std::uint64_t i = 0; i < size; ++i) values.push_back(text());
    return values;
  }
  template <typename T>
  std::vector<T> array() {
    const auto size = scalar<std::uint64_t>();
    need(size * sizeof(T));
    std::vector<T> values(size);
    std::memcpy(values.data(), in_.data() + at_, size * sizeof(T));
    at_ += size * sizeof(T);
    return values;
  }

 private:
  void need(std::size_t bytes) const {
    if (at_ + bytes > in_.size()) throw std::runtime_error("simulation result truncated");
  }
  const std::string& in_;
  std::size_t at_ = 0;
};

}  // namespace

std::string serialize(const SimResult& result) {
  Writer out;
  out.text(result.source);
  out.text(result.mode);
  out.text(result.platform);
  out.scalar(result.world_size);
  out.scalar<std::uint64_t>(result.recorded.size());
  for (std::size_t s = 0; s < result.recorded.size(); ++s) {
    out.array(result.recorded[s]);
    out.array(result.timings[s]);
  }
  out.scalar<std::uint64_t>(result.collectives.size());
  for (const CollectiveRun& run : result.collectives) {
    out.scalar(run.op);
    out.scalar(run.instance);
    out.text(run.algorithm);
    out.scalar(run.bytes);
    out.scalar(run.group_size);
    out.scalar(run.start);
    out.scalar(run.end);
    out.array(run.ranks);
  }
  out.scalar<std::uint64_t>(result.links.size());
  for (const LinkLoad& link : result.links) {
    out.text(link.name);
    out.scalar(link.bandwidth);
    out.scalar(link.bytes);
    out.scalar(link.utilisation);
  }
  out.array(result.iteration_end);
  out.scalar(result.makespan);
  out.texts(result.mode_notes);
  out.texts(result.notes);
  out.text(result.extra.dump());
  out.scalar(static_cast<int>(result.rank_mode));
  out.scalar(result.flows);
  out.scalar(result.folded_nodes);
  out.scalar(result.total_nodes);
  out.text(result.fold_note);
  return out.take();
}

SimResult deserialize(const std::string& bytes) {
  Reader in(bytes);
  SimResult result;
  result.source = in.text();
  result.mode = in.text();
  result.platform = in.text();
  result.world_size = in.scalar<int>();
  const auto recorded = in.scalar<std::uint64_t>();
  for (std::uint64_t s = 0; s < recorded; ++s) {
    result.recorded.push_back(in.array<int>());
    result.timings.push_back(in.array<OpTiming>());
  }
  const auto runs = in.scalar<std::uint64_t>();
  result.collectives.resize(runs);
  for (CollectiveRun& run : result.collectives) {
    run.op = in.scalar<int>();
    run.instance = in.scalar<int>();
    run.algorithm = in.text();
    run.bytes = in.scalar<double>();
    run.group_size = in.scalar<int>();
    run.start = in.scalar<double>();
    run.end = in.scalar<double>();
    run.ranks = in.array<int>();
  }
  const auto links = in.scalar<std::uint64_t>();
  result.links.resize(links);
  for (LinkLoad& link : result.links) {
    link.name = in.text();
    link.bandwidth = in.scalar<double>();
    link.bytes = in.scalar<double>();
    link.utilisation = in.scalar<double>();
  }
  result.iteration_end = in.array<double>();
  result.makespan = in.scalar<double>();
  result.mode_notes = in.texts();
  result.notes = in.texts();
  result.extra = nlohmann::json::parse(in.text());
  result.rank_mode = static_cast<RankMode>(in.scalar<int>());
  result.flows = in.scalar<std::int64_t>();
  result.folded_nodes = in.scalar<int>();
  result.total_nodes = in.scalar<int>();
  result.fold_note = in.text();
  return result;
}

}  // namespace stratsim::sim::detail
