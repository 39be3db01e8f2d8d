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
    if (tensor.id < 0) {  // a tensor of no identity: held as its own storage
      anonymous_.emplace(tensor.bytes, builder_.allocate(tensor.bytes, MemoryTracker::Kind::activation));
      return;
    }
    Held& held = held_[tensor.id];
    if (held.savers++ == 0) {
      held.bytes = tensor.bytes;
      held.storage = builder_.allocate(held.bytes, MemoryTracker::Kind::activation);
    }
  }

  void release(const SavedRef& tensor) {
    if (tensor.id < 0) {
      const auto it = anonymous_.find(tensor.bytes);
      if (it == anonymous_.end()) return;
      builder_.release(it->second);
      anonymous_.erase(it);
      return;
    }
    auto it = held_.find(tensor.id);
    if (it == held_.end()) return;
    if (--it->second.savers == 0) {
      builder_.release(it->second.storage);
      held_.erase(it);
    }
  }

  void clear() {
    held_.clear();
    anonymous_.clear();
  }

 private:
  struct Held {
    int savers = 0;
    std::int64_t bytes = 0;
    MemoryTracker::Tensor storage = ProgramBuilder::kNoTensor;
  };
  ProgramBuilder& builder_;
  std::unordered_map<int, Held> held_;
  std::unordered_multimap<std::int64_t, MemoryTracker::Tensor> anonymous_;  // by size
};

}  // namespace stratsim::core::planner
