// Activation storage, alive as long as PyTorch keeps it: a tensor an op writes is held by the
// forward that made it until its last reader there has run (a container's named tensor, as a
// Python local; what a container returns passes to its caller), by every backward node that saved
// it (q, k and v's shared input is saved by all three projections but held once), and by
// selective checkpointing's cache. The storage is freed when the last of them lets go, so an
// output nothing saves (SwiGLU's intermediates inside a checkpointed block) is allocated and
// freed around its readers, as the caching allocator sees it. A tensor saved without having been
// made here (the model input, a collective's output) gets storage of its own at its first save.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "context.hpp"
#include "program_builder.hpp"

namespace stratsim::core::planner {

// A saved tensor as backward needs to know it: which storage, how big (what a tape entry keeps).
struct SavedRef {
  int id = -1;
  std::int64_t bytes = 0;
  explicit SavedRef(const Activation& tensor) : id(tensor.id), bytes(tensor.bytes()) {}
};

class LiveTensors {
 public:
  explicit LiveTensors(ProgramBuilder& builder) : builder_(builder) {}

  // A tensor an op writes: its storage, with one reference, pending until the forward running
  // the op claims it (claim_made). Counted as an activation once something saves it.
  void make(int id, std::int64_t bytes) {
    if (id < 0 || bytes <= 0) return;
    Held& held = held_[id];
    if (held.refs++ == 0) held.storage = builder_.allocate(bytes);
    made_.push_back(id);
  }
  // A reference passed on as if just made: a container's result to its caller, a cached output
  // to the recomputation that reuses it.
  void hand_on(int id) {
    if (held_.count(id) > 0) made_.push_back(id);
  }
  // Where the pending list stands now; claim_made takes what was made after it, oldest first.
  std::size_t made_mark() const { return made_.size(); }
  std::vector<int> claim_made(std::size_t mark) {
    if (mark >= made_.size()) return {};  // nothing made since (marks nest, so never past the end)
    std::vector<int> made(made_.begin() + static_cast<std::ptrdiff_t>(mark), made_.end());
    made_.resize(mark);
    return made;
  }

  // Another reference for selective checkpointing's cache, which keeps the output as an
  // activation; false if the tensor is not held here.
  bool keep(int id) {
    const auto it = held_.find(id);
    if (it == held_.end()) return false;
    ++it->second.refs;
    count_as_activation(it->second);
    return true;
  }
  void drop(int id) {
    const auto it = held_.find(id);
    if (it == held_.end()) return;
    if (--it->second.refs == 0) {
      builder_.release(it->second.storage);
      held_.erase(it);
    }
  }

  void save(const SavedRef& tensor) {
    if (tensor.id < 0) {  // a tensor of no identity: held as its own storage
      anonymous_.emplace(tensor.bytes, builder_.allocate(tensor.bytes, MemoryTracker::Kind::activation));
      return;
    }
    Held& held = held_[tensor.id];
    if (held.refs++ == 0) {
      held.storage = builder_.allocate(tensor.bytes, MemoryTracker::Kind::activation);
      held.activation = true;
    }
    count_as_activation(held);
  }

  void release(const SavedRef& tensor) {
    if (tensor.id < 0) {
      const auto it = anonymous_.find(tensor.bytes);
      if (it == anonymous_.end()) return;
      builder_.release(it->second);
      anonymous_.erase(it);
      return;
    }
    drop(tensor.id);
  }

  // Between iterations: by then every reference has been let go (the memory history tests check
  // that a steady iteration gives back all it takes).
  void clear() {
    held_.clear();
    anonymous_.clear();
    made_.clear();
  }

 private:
  struct Held {
    int refs = 0;
    MemoryTracker::Tensor storage = ProgramBuilder::kNoTensor;
    bool activation = false;  // saved or cached: the report's activations count it
  };
  void count_as_activation(Held& held) {
    if (held.activation) return;
    builder_.reclassify(held.storage, MemoryTracker::Kind::activation);
    held.activation = true;
  }
  ProgramBuilder& builder_;
  std::unordered_map<int, Held> held_;
  std::unordered_multimap<std::int64_t, MemoryTracker::Tensor> anonymous_;  // by size
  std::vector<int> made_;                                                   // made, not yet claimed
};

// Activation gradients in backward, by tensor: the backward of an op that read a tensor makes its
// gradient, the backward of the op that wrote it reads it and lets it go (autograd's input buffer,
// freed once its node has run). A second gradient for the same tensor (a branch) is summed into the
// first and freed (accumulated in place: the buffer holds the only reference). An add hands its
// output's gradient to its inputs as it is, one storage shared. A tensor a hook replaced (a cast,
// a DTensor redistribution) shares the gradient of the one it replaced: the hook's own backward
// copies are not counted.
class ActivationGrads {
 public:
  explicit ActivationGrads(ProgramBuilder& builder) : builder_(builder) {}

  // `derived` was made from `base` by a hook: their gradients are one.
  void link(int derived, int base) {
    if (derived >= 0 && base >= 0 && derived != base) links_[derived] = base;
  }
  void make(int id, std::int64_t bytes) {
    if (id < 0 || bytes <= 0) return;
    const MemoryTracker::Tensor tensor = builder_.allocate(bytes);
    const int key = root(id);
    if (of_.count(key) > 0) {  // summed into the gradient already there
      builder_.release(tensor);
      return;
    }
    of_[key] = storage_.size();
    storage_.push_back({tensor, 1});
  }
  // An add's backward: `input` gets the gradient of `output`, the same storage.
  void share(int output, int input) {
    const auto it = of_.find(root(output));
    if (it == of_.end() || input < 0 || of_.count(root(input)) > 0) return;
    ++storage_[it->second].refs;
    of_[root(input)] = it->second;
  }
  // The op that wrote `id` has run its backward.
  void consume(int id) {
    const auto it = of_.find(root(id));
    if (it == of_.end()) return;
    Storage& storage = storage_[it->second];
    if (--storage.refs == 0) builder_.release(storage.tensor);
    of_.erase(it);
  }
  // End of backward: a gradient no op read (the model input's) is freed, oldest first.
  void clear() {
    for (Storage& storage : storage_)
      if (storage.refs > 0) builder_.release(storage.tensor);
    storage_.clear();
    of_.clear();
    links_.clear();
  }

 private:
  int root(int id) const {
    std::size_t steps = 0;  // links point to older tensors; the bound only guards a cycle
    for (auto it = links_.find(id); it != links_.end() && steps++ < links_.size(); it = links_.find(id))
      id = it->second;
    return id;
  }
  struct Storage {
    MemoryTracker::Tensor tensor = ProgramBuilder::kNoTensor;
    int refs = 0;
  };
  ProgramBuilder& builder_;
  std::unordered_map<int, int> links_;       // derived -> base
  std::unordered_map<int, std::size_t> of_;  // root tensor -> its gradient's storage
  std::vector<Storage> storage_;
};

}  // namespace stratsim::core::planner
