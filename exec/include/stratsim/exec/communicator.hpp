// Communicators: one group instance of the program's mesh, as one rank sees it, running the
// program's collectives on real buffers. A backend (backend.hpp) creates them; Gloo today, NCCL
// where CUDA is present.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

#include "stratsim/core/dtype.hpp"
#include "stratsim/core/program.hpp"

namespace stratsim::exec {

// One collective on this rank's buffers. Byte conventions follow the program (and nccl-tests):
//   all_reduce      input == output (in place), the whole buffer
//   all_gather      input = this rank's shard, output = size x shard
//   reduce_scatter  input = size x shard, output = this rank's shard
//   broadcast       input == output (in place), from group rank `root`
//   all_to_all      input and output of equal size, size equal blocks each
struct CollectiveCall {
  core::CollectiveKind kind = core::CollectiveKind::all_reduce;
  core::DType dtype = core::DType::float32;
  std::span<std::byte> input;
  std::span<std::byte> output;
  int root = 0;
  std::uint32_t tag = 0;  // distinguishes concurrent calls on one communicator
};

// Thrown when a peer died, hung past the timeout or the transport failed. The message names the
// group and, where the backend can tell, the peer.
struct CommError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;  // this rank's index in the group
  virtual int size() const = 0;
  // Blocks until the collective completes on this rank. Throws CommError, or core::InputError for
  // buffers that do not fit the call (the program's sizes always fit).
  virtual void run(const CollectiveCall& call) = 0;
  // What the library runs for `kind`, for reports: "gloo ring", "gloo halving-doubling", "nccl".
  virtual std::string algorithm(core::CollectiveKind kind) const = 0;
};

}  // namespace stratsim::exec
