// Backends: the library that moves real bytes between rank processes (Gloo over TCP, NCCL on
// CUDA GPUs), its rendezvous, and the key/value store ranks use to gather results.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "stratsim/core/program.hpp"
#include "stratsim/exec/communicator.hpp"

namespace stratsim::exec {

// Where ranks meet. Gloo's own stores, no home-made server: a directory every rank can reach
// (one host, or a cluster's shared file system) or a Redis server across hosts.
struct Rendezvous {
  enum class Kind { file, redis };
  Kind kind = Kind::file;
  std::string path;  // file: the shared directory
  std::string host;  // redis
  int port = 6379;
  std::string run_id = "default";  // keys are scoped by it, so reruns never see stale keys
};

// "file:/shared/dir" | "redis://host[:port]" | "redis:host[:port]". Throws core::InputError.
Rendezvous parse_rendezvous(const std::string& spec, const std::string& run_id);
std::string describe(const Rendezvous& rendezvous);
// Refuses (InputError) an address this host's ranks cannot listen on (`--bind`): one that does not
// resolve, or that no local interface has. Gloo's device would crash on it.
void check_bind_address(const std::string& address);

struct BackendOptions {
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};  // rendezvous, every collective, the store
  std::string bind_address = "127.0.0.1";                       // where this rank listens for peers
};

// What one program stream computes with and where its buffers live: host memory and Eigen
// GEMMs for Gloo; device memory and cuBLAS on the rank's GPU for NCCL. Used by one thread.
class StreamResources {
 public:
  virtual ~StreamResources() = default;
  // Scratch buffer `slot` (0: collective input, 1: collective output) of at least `bytes`;
  // grows as needed, keeps its contents otherwise.
  virtual std::span<std::byte> buffer(int slot, std::size_t bytes) = 0;
  // Real work of `flops` floating-point operations in `dtype` that reads and writes `bytes` of
  // memory, done when it returns: the op the simulator prices by its roofline, run as GEMMs or
  // streamed copies, whichever the roofline says dominates. The host computes in float32.
  virtual void compute(double flops, double bytes, core::DType dtype) = 0;
  // The op's own matrix multiplies (ProgramOp::gemms), C[m,n] = A[m,k] B[k,n] each, so measured
  // GEMM time depends on shape as the simulator's cost model says it does. prepare_gemms runs
  // before the clock starts (allocation and first touch are not the op's time). Backends without
  // shaped kernels run the FLOPs.
  // The GPU runs them in the op's dtype (bfloat16 on tensor cores); the host in float32.
  virtual void prepare_gemms(std::span<const core::GemmShape> /*gemms*/, core::DType /*dtype*/) {}
  virtual void compute_gemms(std::span<const core::GemmShape> gemms, core::DType dtype) {
    double flops = 0;
    for (const core::GemmShape& g : gemms) flops += g.flops();
    compute(flops, 0, dtype);
  }
  // Sustained FLOP/s of compute(), measured: what the calibrated wait sleeps by.
  virtual double calibrate() = 0;
  // Sustained memory bandwidth in bytes/s, measured (0 when the backend does not measure it):
  // with calibrate(), the roofline a calibrated wait follows and a simulated platform is set from.
  virtual double memory_bandwidth() { return 0; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "gloo", "nccl"
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // A communicator over `members` (global ranks in group order, this rank among them). Every
  // member calls it with the same `key`; a rank creates its communicators in one fixed order.
  virtual std::unique_ptr<Communicator> communicator(const std::string& key, const std::vector<int>& members) = 0;
  virtual std::unique_ptr<StreamResources> stream_resources() = 0;
  virtual void barrier() = 0;  // every rank of the world
  // The rendezvous store, for gathering results: fetch waits up to the timeout for the key.
  virtual void publish(const std::string& key, const std::string& value) = 0;
  virtual std::string fetch(const std::string& key) = 0;
};

// Connects this rank to the world through the rendezvous. Throws CommError when peers do not
// show up within the timeout.
std::unique_ptr<Backend> make_gloo_backend(const Rendezvous& rendezvous, int rank, int world_size,
                                           const BackendOptions& options);

// True when this build has the NCCL backend (CUDA toolkit and NCCL found at configure time).
bool nccl_available();
// CUDA devices this process sees; 0 with the reason in `why` when there are none or CUDA fails
// (no driver, driver too old, built without CUDA).
int visible_gpus(std::string& why);
// One CUDA GPU per rank (GPU `local_rank` of this host), NCCL communicators whose unique ids
// travel through the rendezvous store, cuBLAS compute. Throws core::InputError when the build has
// no NCCL, the host has too few GPUs, or two ranks map to one GPU; CommError as the Gloo backend.
std::unique_ptr<Backend> make_nccl_backend(const Rendezvous& rendezvous, int rank, int world_size, int local_rank,
                                           const BackendOptions& options);

}  // namespace stratsim::exec
