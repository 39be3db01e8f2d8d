#include "stratsim/core/caching_allocator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "stratsim/core/errors.hpp"
#include "stratsim/core/profiler_trace.hpp"

namespace stratsim::core {
namespace {

// PyTorch's constants (CUDACachingAllocator.cpp).
constexpr std::int64_t kMinBlockSize = 512;            // every size rounds up to this
constexpr std::int64_t kSmallSize = 1 << 20;           // the largest request the small pool serves
constexpr std::int64_t kSmallBuffer = 2 << 20;         // the small pool's segments
constexpr std::int64_t kLargeBuffer = 20 << 20;        // segments for requests under kMinLargeAlloc
constexpr std::int64_t kMinLargeAlloc = 10 << 20;      // from here a segment fits the request
constexpr std::int64_t kRoundLarge = 2 << 20;          // ... rounded up to this
constexpr std::uint64_t kSegmentSpacing = 1ull << 40;  // expandable segments' reserved address ranges

std::int64_t round_up(std::int64_t bytes, std::int64_t unit) { return (bytes + unit - 1) / unit * unit; }

}  // namespace

CachingAllocator::CachingAllocator(AllocatorConfig config) : config_(config) {}

std::int64_t CachingAllocator::rounded_size(std::int64_t bytes) {
  return bytes < kMinBlockSize ? kMinBlockSize : round_up(bytes, kMinBlockSize);
}

std::int64_t CachingAllocator::segment_size(std::int64_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return round_up(rounded, kRoundLarge);
}

std::int64_t CachingAllocator::size_of(Block block) const { return pieces_.at(static_cast<std::size_t>(block)).size; }

CachingAllocator::PoolKey CachingAllocator::key(int piece) const {
  const Piece& p = pieces_[static_cast<std::size_t>(piece)];
  return {p.small, p.stream, p.size, p.address, piece};
}

// Best fit: the smallest free block of the pool and stream that holds `size`, the lowest address
// among equals (the pool's set orders blocks by stream, size, address). In an expandable segment
// the free block at the end can grow into the unmapped rest, so PyTorch passes it over for the
// next larger free block, when there is one.
int CachingAllocator::find_free(bool small, std::int64_t stream, std::int64_t size) const {
  auto it = free_.lower_bound({small, stream, size, 0, -1});
  const auto in_pool = [&](auto i) {
    return i != free_.end() && std::get<0>(*i) == small && std::get<1>(*i) == stream;
  };
  if (!in_pool(it)) return -1;
  if (config_.expandable_segments && is_tail(std::get<4>(*it)) && in_pool(std::next(it))) ++it;
  return std::get<4>(*it);
}

// In an expandable segment (one per pool and stream), the piece at the end is the one with no
// neighbour after it; merged-away pieces are empty.
bool CachingAllocator::is_tail(int piece) const { return pieces_[static_cast<std::size_t>(piece)].next < 0; }

int CachingAllocator::tail_of(bool small, std::int64_t stream) const {
  const auto it = tails_.find({small, stream});
  return it == tails_.end() ? -1 : it->second;
}

void CachingAllocator::count_reserved(std::int64_t bytes) {
  stats_.reserved += bytes;
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  ++stats_.segments;
}

int CachingAllocator::new_segment(bool small, std::int64_t stream, std::int64_t size,
                                  std::optional<std::uint64_t> address) {
  Piece segment;
  segment.size = segment_size(size);
  segment.address = address.value_or(next_address_);
  next_address_ = std::max(next_address_, segment.address + static_cast<std::uint64_t>(segment.size));
  segment.stream = stream;
  segment.small = small;
  pieces_.push_back(segment);
  count_reserved(segment.size);
  return static_cast<int>(pieces_.size()) - 1;
}

// Expandable segments: the pool's one segment for this stream maps pages at its end until the
// free block there (or a new one) holds the request.
int CachingAllocator::grow_expandable(bool small, std::int64_t stream, std::int64_t size) {
  const std::int64_t page = small ? kSmallBuffer : kLargeBuffer;
  const int end = tail_of(small, stream);
  if (end >= 0 && pieces_[static_cast<std::size_t>(end)].free) {
    Piece& last = pieces_[static_cast<std::size_t>(end)];
    const std::int64_t mapped = round_up(size - last.size, page);
    free_.erase(key(end));
    last.size += mapped;
    count_reserved(mapped);
    return end;
  }
  Piece grown;
  grown.size = round_up(size, page);
  grown.stream = stream;
  grown.small = small;
  grown.prev = end;
  if (end >= 0) {
    const Piece& last = pieces_[static_cast<std::size_t>(end)];
    grown.address = last.address + static_cast<std::uint64_t>(last.size);
  } else {  // a new segment: its own reserved address range
    grown.address = next_address_;
    next_address_ += kSegmentSpacing;
  }
  pieces_.push_back(grown);
  const int piece = static_cast<int>(pieces_.size()) - 1;
  if (end >= 0) pieces_[static_cast<std::size_t>(end)].next = piece;
  tails_[{small, stream}] = piece;
  count_reserved(grown.size);
  return piece;
}

// The block keeps `size`; the rest becomes a free block after it in the segment.
void CachingAllocator::split(int piece, std::int64_t size) {
  Piece rest = pieces_[static_cast<std::size_t>(piece)];
  rest.address += static_cast<std::uint64_t>(size);
  rest.size -= size;
  rest.free = true;
  rest.prev = piece;
  pieces_.push_back(rest);
  const int index = static_cast<int>(pieces_.size()) - 1;
  Piece& kept = pieces_[static_cast<std::size_t>(piece)];
  kept.size = size;
  kept.next = index;
  if (rest.next >= 0) pieces_[static_cast<std::size_t>(rest.next)].prev = index;
  else if (config_.expandable_segments) tails_[{rest.small, rest.stream}] = index;
  free_.insert(key(index));
}

CachingAllocator::Block CachingAllocator::allocate(std::int64_t bytes, std::int64_t stream,
                                                   std::optional<std::uint64_t> segment_address) {
  const std::int64_t size = rounded_size(bytes);
  const bool small = size <= kSmallSize;
  int piece = find_free(small, stream, size);
  if (piece >= 0) free_.erase(key(piece));
  else if (config_.expandable_segments) piece = grow_expandable(small, stream, size);
  else piece = new_segment(small, stream, size, segment_address);
  // Small blocks split down to 512 B; large ones only when more than 1 MiB is left (a large block
  // is otherwise kept whole), except in an expandable segment, where any rest is worth keeping.
  const std::int64_t rest = pieces_[static_cast<std::size_t>(piece)].size - size;
  if ((small || config_.expandable_segments) ? rest >= kMinBlockSize : rest > kSmallSize) split(piece, size);
  Piece& block = pieces_[static_cast<std::size_t>(piece)];
  block.free = false;
  stats_.allocated += block.size;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  return piece;
}

// `neighbour` (free) joins `piece`; the merged block keeps `piece`'s index.
void CachingAllocator::merge_into(int piece, int neighbour) {
  Piece& p = pieces_[static_cast<std::size_t>(piece)];
  Piece& n = pieces_[static_cast<std::size_t>(neighbour)];
  free_.erase(key(neighbour));
  if (n.next == piece) {  // before
    p.address = n.address;
    p.prev = n.prev;
    if (n.prev >= 0) pieces_[static_cast<std::size_t>(n.prev)].next = piece;
  } else {  // after
    p.next = n.next;
    if (n.next >= 0) pieces_[static_cast<std::size_t>(n.next)].prev = piece;
    else if (config_.expandable_segments) tails_[{p.small, p.stream}] = piece;
  }
  p.size += n.size;
  n.size = 0;
  n.prev = n.next = -1;
}

void CachingAllocator::release(Block block) {
  if (block < 0 || block >= static_cast<int>(pieces_.size()) || pieces_[static_cast<std::size_t>(block)].free)
    throw InputError(fmt::format("caching allocator: block {} is not allocated", block));
  Piece& p = pieces_[static_cast<std::size_t>(block)];
  p.free = true;
  stats_.allocated -= p.size;
  for (int neighbour : {p.prev, p.next})
    if (neighbour >= 0 && pieces_[static_cast<std::size_t>(neighbour)].free) merge_into(block, neighbour);
  free_.insert(key(block));
}

namespace {

std::vector<AllocatorEvent> read_events(const nlohmann::json& trace, const std::string& path) {
  std::vector<AllocatorEvent> events;
  for (std::size_t i = 0; i < trace.size(); ++i) {
    const auto& entry = trace[i];
    if (!entry.is_array() || entry.size() < 4 || !entry[0].is_string() || !entry[1].is_number_unsigned() ||
        !entry[2].is_number_integer() || !entry[3].is_number_integer())
      throw InputError(fmt::format("{}: trace[{}]: expected [action, address, size, stream, ...]", path, i));
    const std::string action = entry[0].get<std::string>();
    AllocatorEvent event;
    if (action == "alloc") event.action = AllocatorEvent::Action::alloc;
    else if (action == "free_completed") event.action = AllocatorEvent::Action::free;
    else if (action == "segment_alloc" || action == "segment_map") event.action = AllocatorEvent::Action::segment;
    else continue;  // free_requested, segment_free/unmap (only under empty_cache or an OOM), snapshot, oom
    event.address = entry[1].get<std::uint64_t>();
    event.size = entry[2].get<std::int64_t>();
    event.stream = entry[3].get<std::int64_t>();
    if (event.size < 0) throw InputError(fmt::format("{}: trace[{}]: negative size", path, i));
    events.push_back(event);
  }
  return events;
}

std::optional<std::int64_t> stat(const nlohmann::json& stats, const char* name) {
  const auto it = stats.find(name);
  if (it == stats.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<std::int64_t>();
}

}  // namespace

AllocatorHistory read_allocator_trace(const std::string& path) {
  const nlohmann::json document = nlohmann::json::parse(read_maybe_gzipped_file(path), nullptr, false);
  if (document.is_discarded() || !document.is_object() || !document.contains("trace") || !document["trace"].is_array())
    throw InputError(fmt::format("{}: expected an allocator history with a \"trace\" array", path));
  AllocatorHistory history;
  history.events = read_events(document["trace"], path);
  const auto settings = document.find("allocator_settings");
  if (settings != document.end() && settings->is_object()) {
    const auto flag = settings->find("expandable_segments");
    history.recorded_expandable = flag != settings->end() && flag->is_boolean() && flag->get<bool>();
  }
  if (const auto source = document.find("source"); source != document.end() && source->is_string())
    history.source = source->get<std::string>();
  const auto stats = document.find("stats");
  if (stats != document.end() && stats->is_object()) {
    history.recorded_allocated_peak = stat(*stats, "allocated_bytes.all.peak");
    history.recorded_reserved_peak = stat(*stats, "reserved_bytes.all.peak");
  }
  return history;
}

AllocatorStats replay_allocator_trace(const std::vector<AllocatorEvent>& events, AllocatorConfig config,
                                      bool at_recorded_addresses) {
  CachingAllocator allocator(config);
  std::unordered_map<std::uint64_t, CachingAllocator::Block> live;
  std::optional<std::uint64_t> segment_address;
  for (const AllocatorEvent& event : events) {
    switch (event.action) {
      case AllocatorEvent::Action::segment:
        if (at_recorded_addresses) segment_address = event.address;  // recorded before the alloc it serves
        break;
      case AllocatorEvent::Action::alloc:
        live[event.address] = allocator.allocate(event.size, event.stream, std::exchange(segment_address, {}));
        break;
      case AllocatorEvent::Action::free: {
        const auto it = live.find(event.address);
        if (it == live.end())
          throw InputError(fmt::format(
              "allocator history: free of {:#x}, which is not allocated (a history must be recorded from before "
              "the first allocation)",
              event.address));
        allocator.release(it->second);
        live.erase(it);
        break;
      }
    }
  }
  return allocator.stats();
}

}  // namespace stratsim::core
