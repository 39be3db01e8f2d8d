// PyTorch's CUDA caching allocator as a model: what `torch.cuda.max_memory_reserved()` reads,
// beside the bytes the tensors hold (`max_memory_allocated()`). The allocator never hands memory
// back to the driver on its own; it keeps every segment it ever cudaMalloc'ed and carves later
// requests out of them, so the reserved peak is set by how the sizes and lifetimes of a step's
// tensors fit into the segments earlier requests left, not by the live bytes alone. One GPU's
// Llama 3 steps reserve 1.18-1.31 x what they allocate (benchmarks/accuracy/gpu/measured/).
//
// The rules are PyTorch's (c10/cuda/CUDACachingAllocator.cpp, unchanged from 2.6 to 2.11):
//  - sizes round up to 512 B; requests up to 1 MiB come from the small pool, larger ones from the
//    large pool, and the two never share a segment;
//  - a request takes the smallest cached free block of its pool and stream that fits (ties: the
//    lowest address); without one, a new segment: 2 MiB for the small pool, 20 MiB for requests
//    under 10 MiB, else the request rounded up to 2 MiB;
//  - the block is split when the rest is at least 512 B (small pool) or more than 1 MiB (large);
//  - a freed block merges with free neighbours of its segment and goes back to its pool.
// With expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, torchtitan's
// default) each pool and stream has one segment that grows by mapping 2 MiB pages (20 MiB for the
// large pool) at its end, so a request that does not fit a free block maps only what the free
// block at the end lacks; blocks split down to 512 B there, and the search passes over the free
// block at the end when a larger one is free.
//
// Replaying a recorded allocator history (`llama_step.py --memory-trace`) through this model gives
// PyTorch's own segments and reserved peak; tests/core/caching_allocator_test.cpp checks that on
// ten recordings.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace stratsim::core {

struct AllocatorConfig {
  bool expandable_segments = false;
};

struct AllocatorStats {
  std::int64_t allocated = 0;  // bytes of live blocks (rounded sizes), as memory_allocated()
  std::int64_t reserved = 0;   // bytes of segments (mapped pages when expandable), as memory_reserved()
  std::int64_t peak_allocated = 0;
  std::int64_t peak_reserved = 0;
  int segments = 0;  // segments created (cudaMalloc calls; page mappings when expandable)
};

class CachingAllocator {
 public:
  using Block = int;

  explicit CachingAllocator(AllocatorConfig config = {});

  // A tensor of `bytes` on `stream`. `segment_address`, when the caller knows where the driver put
  // a new segment (a recorded history), orders equal-sized free blocks as PyTorch saw them;
  // otherwise each new segment lies above the previous ones.
  Block allocate(std::int64_t bytes, std::int64_t stream = 0, std::optional<std::uint64_t> segment_address = {});
  void release(Block block);

  const AllocatorStats& stats() const { return stats_; }
  std::int64_t size_of(Block block) const;  // the rounded size the block holds

  // What the allocator's rounding makes of a request, and the segment it would cudaMalloc for it.
  static std::int64_t rounded_size(std::int64_t bytes);
  static std::int64_t segment_size(std::int64_t rounded);

 private:
  struct Piece {
    std::uint64_t address = 0;
    std::int64_t size = 0;
    std::int64_t stream = 0;
    bool small = false;
    bool free = true;
    int prev = -1, next = -1;  // neighbours in the segment
  };
  using PoolKey =
      std::tuple<bool, std::int64_t, std::int64_t, std::uint64_t, int>;  // small, stream, size, address, piece

  PoolKey key(int piece) const;
  int find_free(bool small, std::int64_t stream, std::int64_t size) const;
  bool is_tail(int piece) const;
  int tail_of(bool small, std::int64_t stream) const;
  int new_segment(bool small, std::int64_t stream, std::int64_t size, std::optional<std::uint64_t> address);
  int grow_expandable(bool small, std::int64_t stream, std::int64_t size);
  void split(int piece, std::int64_t size);
  void merge_into(int piece, int neighbour);
  void count_reserved(std::int64_t bytes);

  AllocatorConfig config_;
  AllocatorStats stats_;
  std::vector<Piece> pieces_;
  std::set<PoolKey> free_;
  std::map<std::pair<bool, std::int64_t>, int> tails_;   // expandable: each pool and stream's last piece
  std::uint64_t next_address_ = std::uint64_t{1} << 40;  // where the next segment starts, unless given
};

// A recorded history of the allocator: `llama_step.py --memory-trace`'s or `tools/allocator-history`'s
// file (JSON, gzipped or not, with "trace": [[action, address, size, stream, time_us], ...]).
struct AllocatorEvent {
  enum class Action { alloc, free, segment };  // free: free_completed; segment: segment_alloc or segment_map
  Action action = Action::alloc;
  std::uint64_t address = 0;
  std::int64_t size = 0;
  std::int64_t stream = 0;
};
struct AllocatorHistory {
  std::vector<AllocatorEvent> events;
  // What the file says of the run, where it says it: "allocator_settings" and PyTorch's "stats".
  bool recorded_expandable = false;
  std::optional<std::int64_t> recorded_allocated_peak, recorded_reserved_peak;
  std::string source;  // "source": what wrote a history that was not recorded ("stratsim plan")
};
AllocatorHistory read_allocator_trace(const std::string& path);

// Replays a history through the model: every alloc and free in order, each new segment at the
// address the history gives (or, without `at_recorded_addresses`, above the last, as a prediction
// places them). Throws InputError on a free of an address not allocated.
AllocatorStats replay_allocator_trace(const std::vector<AllocatorEvent>& events, AllocatorConfig config,
                                      bool at_recorded_addresses = true);

}  // namespace stratsim::core
