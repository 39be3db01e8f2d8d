// The cost model: what a device and its network achieve in practice, beside what their datasheets
// say (platform.hpp holds those). It is data, not code. Each preset's model is a YAML file under
// sim/cost-models/, with the source of every number, compiled into the binary and read by the same
// parser as a user's file (`cost_model:` in a platform description). With every factor at 1
// (CostModel::ideal(), `--platform h100:model=ideal`) the simulator gives the bare roofline and the
// alpha-beta closed forms of the collectives.
//
// What it covers (sim/README.md "Cost model" documents the file):
//  - compute (ComputeModel, device.hpp): GEMM efficiency by shape and dtype, achieved fractions of
//    peak math and HBM bandwidth per op class, a kernel launch floor;
//  - the network: achieved fraction of each link class's rate, and NCCL's protocols (LL, LL128,
//    Simple), each with the share of the link that carries data and its latencies; a collective
//    runs the algorithm and protocol NCCL's tuner picks where the model has it (nccl_tuner.hpp),
//    else the protocol with the lowest estimated time;
//  - interference: compute and communication kernels that run at the same time on one device
//    slow each other (SMs and HBM shared; on a CPU host, cores).
#pragma once

#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stratsim/core/json_reader.hpp"
#include "stratsim/sim/collective.hpp"
#include "stratsim/sim/device.hpp"
#include "stratsim/sim/nccl_tuner.hpp"

namespace stratsim::sim {

// A collective's time by size, measured on one group shape: nccl-tests on a cluster (`stratsim
// calibrate --nccl-tests`), or Gloo on this host. Between the measured sizes the time is
// interpolated linearly in the size; the curve holds for groups of the same size spanning the same
// number of nodes (an 8-GPU curve from one node says nothing about 8 GPUs on 8 nodes).
struct MeasuredCurve {
  int ranks = 0;                // the group size it was measured on
  int nodes = 1;                // the nodes those ranks spanned
  std::vector<double> bytes;    // nccl-tests n, increasing
  std::vector<double> seconds;  // one per size
  // Below the smallest size its time (latency-bound); above the largest size the largest's time per
  // byte (bandwidth-bound); in between the line through the two neighbouring sizes.
  double seconds_at(double n) const;
};

// One NCCL protocol. LL moves 8-byte lines holding 4 bytes of data and a flag (half the link),
// LL128 128-byte lines holding 120, Simple whole buffers behind memory fences (all of the link,
// but a synchronisation per step).
struct Protocol {
  std::string name;               // "LL", "LL128", "Simple"
  double bandwidth_fraction = 1;  // share of the achieved link bandwidth that carries data, (0, 1]
  double base_latency = 0;        // seconds per collective: launch and set-up (replaces the platform's overhead)
  // Seconds added per algorithm step beyond the route's own latency (flag polling, fences), for
  // steps inside a node (NVLink) and steps between nodes (NIC): NCCL's hwLat less the link latency.
  double step_latency_intra = 0;
  double step_latency_inter = 0;
  double max_bytes = std::numeric_limits<double>::infinity();  // not used for larger collectives (n, bytes)
  // Bytes each link moves per step of a chunk pipeline (NCCL's trees: its chunk times the channels
  // that share the link), which the pipeline's fill pays once per hop (ScheduleCost::fill). 0: none.
  double pipeline_chunk = 0;
  // A kind measured by size (network.per_kind only): on the group shapes it holds, the curve is the
  // collective's whole time. An entry of curves alone (no bandwidth_fraction) leaves every other
  // shape to the protocols, as if the kind had no entry.
  std::vector<MeasuredCurve> measured;  // by ranks, then nodes
  bool has_line = true;                 // bandwidth_fraction and the latencies were given
  const MeasuredCurve* measured_on(int ranks, int nodes) const;
};

struct NetworkModel {
  // Achieved fraction of the line rate per link class, at large sizes: the platform's links are
  // built at rate x efficiency, so contention and utilisation see what the hardware delivers.
  double nvlink_efficiency = 1;     // GPU <-> NVSwitch
  double nic_efficiency = 1;        // NIC and fabric links
  double loopback_efficiency = 1;   // cpu host: per-process loopback and shared memory copies
  std::vector<Protocol> protocols;  // empty: one ideal protocol (whole link, the platform's overhead)
  // NVLS (NVLink SHARP): the NVSwitch reduces all-reduces inside a node. fraction 0: the switch
  // cannot (A100's NVSwitch, CPU hosts). Its link share and latency are its own, not a protocol's.
  double nvls_bandwidth_fraction = 0;
  double nvls_base_latency = 0;
  // NCCL's NVLS pipelines its reduce and multicast halves over loops of chunks (its channels x the
  // members x 128 KiB: 16 MiB on 8 H100s), so inside the first loop they do not overlap: that
  // share of the first `nvls_first_loop_bytes` moves on top, at NVLS's rate. 0: none.
  double nvls_first_loop_fraction = 0;
  double nvls_first_loop_bytes = 0;
  // NVLSTree's fixed cost (its trees' chunk pipeline fills through the protocol); 0: NVLS's.
  double nvls_tree_base_latency = 0;
  double nvls_tree_launch() const { return nvls_tree_base_latency > 0 ? nvls_tree_base_latency : nvls_base_latency; }
  // NVLS's share inside NVLSTree (all-reduce across nodes), where the same SMs also drive the
  // network and the tree's sums; 0: nvls_bandwidth_fraction.
  double nvls_tree_bandwidth_fraction = 0;
  double nvls_tree_fraction() const {
    return nvls_tree_bandwidth_fraction > 0 ? nvls_tree_bandwidth_fraction : nvls_bandwidth_fraction;
  }
  // The collective library's fixed algorithm per kind, where it has no tuner: Gloo runs a ring
  // all-reduce and all-gather, halving-doubling reduce-scatter, one-to-all broadcast and pairwise
  // all-to-all whatever the size. Kinds not listed are selected NCCL's way; --algorithm overrides.
  std::map<core::CollectiveKind, Algorithm> algorithms;
  // Measured costs per collective kind, where one library's kinds differ more than its links
  // explain (Gloo's in-place halving-doubling reduce-scatter moves several times the bytes of its
  // all-gather): a protocol of its own per kind, used instead of `protocols` for that kind.
  // `stratsim calibrate` fits them.
  std::map<core::CollectiveKind, Protocol> per_kind;
  // The same for one dtype of a kind ("all_reduce/float16": Gloo reduces half precision in
  // software, slower than float32); looked up before per_kind.
  std::map<std::pair<core::CollectiveKind, core::DType>, Protocol> per_kind_dtype;
  // NCCL's own cost model, where the model has it: the selector chooses the algorithm and protocol
  // it would (nccl_tuner.hpp), and the engine prices what then runs. None: the lowest own estimate.
  std::optional<NcclTuner> tuner;
};

struct Interference {
  double compute_slowdown = 1;        // a compute op that starts while a collective of its rank is in flight
  double communication_slowdown = 1;  // a collective that starts while its rank computes moves its bytes slower
};

struct CostModel {
  std::string name = "ideal";  // "h100 (published)", "ideal", the file it came from
  ComputeModel compute = ComputeModel::ideal();
  NetworkModel network;
  Interference interference;
  std::vector<std::string> sources;  // where the numbers come from, as the file says

  static CostModel ideal();
  // The compiled-in model of a preset: "a100", "h100", "h200", "cpu". Throws InputError otherwise.
  static CostModel preset(const std::string& name);

  // Reads a cost-model document over this model: members it has replace, members it lacks keep
  // their values. All or nothing: on error (InputError naming the file and field) nothing changes.
  void apply(const core::JsonReader& root);
  void apply_file(const std::string& path);
};

// The time a collective whose idle-platform schedule costs `cost` (estimate_parts: route latency
// over its intra and inter steps, transfer on the ideal protocol, a chunk pipeline's fill) takes
// under `protocol`: base + latency + steps x step latencies + (transfer + the fill of the
// protocol's chunk, up to the schedule's limit) / fraction.
double protocol_time(const Protocol& protocol, const ScheduleCost& cost);
// The bytes of one chunk of a pipeline whose size allows chunks up to `chunk_limit` under
// `protocol` (Schedule::chunk_limit; 0 for rings), that moves `chunk_fraction` of the protocol's
// chunk (Schedule::chunk_fraction).
double fill_chunk(const Protocol& protocol, double chunk_limit, double chunk_fraction);
// The protocol NCCL's tuner would pick: the lowest protocol_time among the protocols allowed for
// `bytes`. Null when the model has none.
const Protocol* choose_protocol(const NetworkModel& network, double bytes, const ScheduleCost& cost);
// The protocol NVLS algorithms run under: Simple, the only one NCCL pairs NVLS and NVLSTree with.
// Null when the model has no protocol of that name (the ideal one: whole link, no step latency).
const Protocol* nvls_protocol(const NetworkModel& network);
// The model's protocol of that name (case-insensitive), or null.
const Protocol* find_protocol(const NetworkModel& network, std::string_view name);

}  // namespace stratsim::sim
