// Tensors saved for backward, held once however many autograd nodes save them: q, k and v's shared
// input is saved by all three projections, a ReLU's result by the ReLU and the Linear after it. The
// storage is freed when the last node that saved it has run its backward.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "context.hpp"
#include "program_builder.hpp"

namespace stratsim::core::planner {

// A saved tensor as backward needs to know it: which storage, how big (what a tape entry keeps).
struct SavedRef {
  int id = -1;
  std::int64_t bytes = 0;
  explicit SavedRef(const Activation& tensor) : id(tensor.id), bytes(tensor.bytes()) {}
};

class SavedTensors {
 public:
  explicit SavedTensors(ProgramBuilder& builder) : builder_(builder) {}

  void save(const SavedRef& tensor) {
    if (tensor.id < 0) return builder_.add_memory(tensor.bytes, MemoryTracker::Kind::activation);
    Held& held = held_[tensor.id];
    if (held.savers++ == 0) {
      held.bytes = tensor.bytes;
      builder_.add_memory(held.bytes, MemoryTracker::Kind::activation);
    }
  }

  void release(const SavedRef& tensor) {
    if (tensor.id < 0) return builder_.add_memory(-tensor.bytes, MemoryTracker::Kind::activation);
    auto it = held_.find(tensor.id);
    if (it == held_.end()) return;
    if (--it->second.savers == 0) {
      builder_.add_memory(-it->second.bytes, MemoryTracker::Kind::activation);
      held_.erase(it);
    }
  }

  void clear() { held_.clear(); }

 private:
  struct Held {
    int savers = 0;
    std::int64_t bytes = 0;
  };
  ProgramBuilder& builder_;
  std::unordered_map<int, Held> held_;
};

}  // namespace stratsim::core::planner
