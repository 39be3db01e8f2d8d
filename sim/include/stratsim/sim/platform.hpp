// Platforms: the modelled cluster a program runs on. Either a built-in generator with parameters
// (one node of GPUs on NVSwitch; nodes over a fat-tree or spine-leaf fabric with one NIC per GPU
// or per node; a CPU host where processes talk over loopback TCP), or any SimGrid XML file.
//
// The spec is plain data (parsed and validated without SimGrid); build_platform() turns it into
// SimGrid zones, hosts and links inside a simulation process.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "stratsim/sim/cost_model.hpp"
#include "stratsim/sim/device.hpp"

namespace simgrid::s4u {
class Engine;
class Host;
class Link;
}  // namespace simgrid::s4u

namespace stratsim::sim {

enum class PlatformKind { node, cluster, cpu_host, xml };
enum class Fabric { fat_tree, spine_leaf };

// Bandwidths in bytes/s per direction, latencies in seconds.
struct PlatformSpec {
  std::string name;  // what the user asked for: "h100", "h100:nodes=4,nic=node", "cpu:procs=4", "file.xml"
  PlatformKind kind = PlatformKind::node;
  std::string preset;  // "a100", "h100", "h200", "cpu"
  DeviceSpec device;

  int nodes = 1;
  int gpus_per_node = 8;
  double nvlink_bandwidth = 0;  // per GPU to the NVSwitch (or loopback per process on cpu_host)
  double nvlink_latency = 0;
  double nic_bandwidth = 0;  // per NIC
  double nic_latency = 0;
  bool nic_per_gpu = true;  // rail-optimised: one NIC per GPU; false: one NIC per node
  Fabric fabric = Fabric::fat_tree;
  double oversubscription = 1.0;     // leaf downlink : uplink bandwidth ratio (>= 1)
  int nodes_per_leaf = 4;            // nodes under one leaf switch (spine-leaf, fat-tree level 1)
  double switch_latency = 0;         // per fabric link
  double loopback_bandwidth = 0;     // cpu_host: shared memory-copy bandwidth of the host, all processes together
  double collective_overhead = 0;    // fixed cost per collective launch (kernel launch, NCCL proxy), seconds
  int cores = 0;                     // cpu_host: cores the rank processes share (0: a core each)
  double host_memory_bandwidth = 0;  // cpu_host: DRAM bandwidth all processes share (0: no bound)

  std::string xml_file;  // kind == xml

  // What the device and network achieve (cost_model.hpp): the preset's published model by
  // default, CostModel::ideal() with `model=ideal`, a file's with `cost_model:` in a description.
  CostModel cost;

  int device_count() const { return nodes * gpus_per_node; }  // not meaningful for xml until built
};

// "h100" | "h100:nodes=4,gpus=8,nic=gpu|node,fabric=fat-tree|spine-leaf,oversub=2,nic_gbps=400,
// model=ideal|published,..." | "cpu:procs=4" | a SimGrid .xml file | a .json/.yaml platform
// description (the same keys, plus `cost_model:` a file or an inline cost model applied over the
// preset's). Throws InputError.
PlatformSpec parse_platform(const std::string& text);

// power_w against the platform's cost model as it stands (parse_platform checks it; call again
// after replacing the compute model): throws InputError when the model has no figure for it.
void check_power_limit(const PlatformSpec& spec);
// A platform description already parsed (JSON or YAML); `origin` names it in errors and anchors a
// relative `cost_model:` file. Throws InputError.
PlatformSpec platform_from_document(const nlohmann::json& document, const std::string& origin);

struct PresetInfo {
  std::string name;
  std::string description;
  std::string options;  // the key=value options it accepts
};
std::vector<PresetInfo> platform_presets();
std::string describe_platform(const PlatformSpec& spec);  // one paragraph for `stratsim platforms NAME` and reports

// The SimGrid side. Call inside a process that owns a simgrid::s4u::Engine, before run().
struct BuiltPlatform {
  std::vector<simgrid::s4u::Host*> devices;  // device slot i runs rank i
  std::vector<int> node_of;                  // node index per device slot
  std::vector<simgrid::s4u::Link*> links;    // every link, for utilisation
};
BuiltPlatform build_platform(const PlatformSpec& spec);

// The network-model settings that make SimGrid's flows match alpha-beta closed forms
// (simulators.md 4.3): CM02, no cross-traffic, no TCP window bound, quiet logs. Call right after
// creating the engine, before build_platform().
void configure_simgrid(simgrid::s4u::Engine& engine);

}  // namespace stratsim::sim
