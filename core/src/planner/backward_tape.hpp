// Autograd's order, as the planner models it: each forward step pushes what its backward will do,
// and backward replays the tape in reverse. Hooks registered on a module's output (FSDP's
// pre-backward) sit at the end of the tape while that output is the running activation; a
// checkpointed region's recomputation is inserted below them, because autograd runs those hooks
// before the first node inside the region unpacks a saved tensor.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace stratsim::core::planner {

class BackwardTape {
 public:
  using Entry = std::function<void()>;

  void clear() {
    entries_.clear();
    hook_run_end_ = SIZE_MAX;
  }
  std::size_t size() const { return entries_.size(); }
  void push(Entry entry) { entries_.push_back(std::move(entry)); }

  // A hook on the output of the module that just ran forward; consecutive ones form a run that
  // stays at the end of the tape while nothing else is pushed. They sit on one tensor, whose hooks
  // autograd runs in the order they were registered (an inner module's before its parent's): a new
  // one goes to the run's start, which the reversed replay reaches last.
  void push_output_hook(Entry entry) {
    if (hook_run_end_ != entries_.size()) {
      hook_run_begin_ = entries_.size();
      entries_.push_back(std::move(entry));
    } else {
      entries_.insert(entries_.begin() + static_cast<std::ptrdiff_t>(hook_run_begin_), std::move(entry));
    }
    hook_run_end_ = entries_.size();
  }
  // The module returned a new tensor (redistribute / to_local): hooks registered on the inner
  // output no longer sit on the module's output.
  void output_replaced() { hook_run_end_ = SIZE_MAX; }

  // Inserts a checkpointed region's recomputation: after the region's own entries (from
  // `region_start`), so backward replays the region before any of them, but below the output hooks
  // that end the tape, and no later than `latest` (the position after the region's last entry
  // that reads saved tensors: entries above it run before the recomputation is triggered).
  void insert_region_replay(Entry replay, std::size_t region_start, std::size_t latest = SIZE_MAX) {
    const bool hooks_at_end = hook_run_end_ == entries_.size();
    std::size_t at = hooks_at_end ? std::max(hook_run_begin_, region_start) : entries_.size();
    at = std::min(at, std::max(region_start, latest));
    entries_.insert(entries_.begin() + static_cast<std::ptrdiff_t>(at), std::move(replay));
    if (hooks_at_end && at <= hook_run_begin_) {
      ++hook_run_begin_;  // the hooks still end the tape, one slot later
      ++hook_run_end_;
    }
  }

  void run_backward() const {
    for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) (*it)();
  }

 private:
  std::vector<Entry> entries_;
  // The output-hook run at the end of the tape: entries_[begin, end), valid while end == size().
  std::size_t hook_run_begin_ = 0, hook_run_end_ = SIZE_MAX;
};

}  // namespace stratsim::core::planner
