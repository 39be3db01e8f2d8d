// Turns a PlatformSpec into SimGrid 3.32 zones, hosts and links.
//
// Layout (all links split-duplex unless noted; "lat" is per link, a route adds its links'):
//
//   node       one star zone "node0": host node0.gpuI has link node0.gpuI.nvlink (NVLink bandwidth
//              and latency) to the NVSwitch. gpu i -> gpu j = [nvlink_i UP, nvlink_j DOWN], so the
//              switch is non-blocking and a pair's latency is 2 * nvlink_latency.
//   cluster    a Dijkstra zone "cluster" (the root) whose children are one zone per leaf switch and,
//              with more than one leaf, a zone "spine"; two levels deep at most (SimGrid 3.32
//              mis-routes deeper nesting, GH#389).
//                - leaf zone "leafL" (Dijkstra, cached): the GPUs of nodes L*nodes_per_leaf ..
//                  +nodes_per_leaf-1, a router nodeX.nvswitch per node and the leaf switch
//                  router leafL.switch (the zone's gateway). gpu -> its NVSwitch =
//                  [nodeX.gpuI.nvlink UP]; gpu -> leaf switch = [nic UP, nodeX.port UP] where
//                  nic is nodeX.gpuI.nic (nic=gpu) or nodeX.nic (nic=node: the node's GPUs share
//                  it). nodeX.port is the node's cables into the leaf: bandwidth = the node's
//                  NIC total (never the bottleneck on its own), latency switch_latency / 2, so
//                  crossing the leaf costs one switch latency in all. Shortest paths count links,
//                  so intra-node traffic (2 links) never leaves NVLink (4 links via the leaf).
//                - zone "spine" holding router spine.switch; leaf -> spine = [leafL.uplink UP],
//                  bandwidth = the leaf's downlink total (nodes_per_leaf x node NIC total) /
//                  oversubscription, latency switch_latency.
//              gpu a (node x) -> gpu b (node y), same leaf:
//                  [nic_a UP, nodeX.port UP, nodeY.port DOWN, nic_b DOWN]
//                  latency 2 nic_latency + switch_latency
//              different leaves:
//                  [nic_a UP, nodeX.port UP, leafP.uplink UP, leafQ.uplink DOWN, nodeY.port DOWN, nic_b DOWN]
//                  latency 2 nic_latency + 3 switch_latency (leaf, spine, leaf).
//              fat-tree and spine-leaf build the same two-tier Clos: one split-duplex uplink per
//              leaf whose bandwidth carries the oversubscription stands for the leaf's uplinks
//              to a non-blocking spine.
//              Size: routes are edges, linear in GPUs; Dijkstra caches one predecessor array per
//              source, so memory grows as GPUs x GPUs-per-leaf (16384 H100s, 4 nodes per leaf:
//              ~5 MB when every GPU has sent) plus leaves^2 at the root.
//   cpu_host   one star zone "host": host procI has link procI.loopback (per-process bandwidth
//              and latency) and every route also crosses the shared link host.memory
//              (loopback_bandwidth, all processes together): procI -> procJ =
//              [procI.loopback UP, host.memory, procJ.loopback DOWN].
//   xml        Engine::load_platform(); devices are the hosts in natural name order.
//
// Host speed is the device's bf16 peak: the simulator computes op durations itself and executes
// duration * speed flops, so the speed only has to be consistent.
#include <fmt/format.h>
#include <xbt/log.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <simgrid/s4u.hpp>

#include "stratsim/core/errors.hpp"
#include "stratsim/sim/platform.hpp"

namespace stratsim::sim {
namespace {

namespace sg4 = simgrid::s4u;
using simgrid::kernel::routing::NetPoint;
using Direction = sg4::LinkInRoute::Direction;

// The links of one cluster node (nic holds the node's NIC gpus_per_node times when nic=node).
struct NodeLinks {
  std::vector<sg4::Link*> nvlink, nic;
  sg4::Link* port = nullptr;
};

class Builder {
 public:
  explicit Builder(const PlatformSpec& spec) : spec_(achieved(spec)) {}

  BuiltPlatform build();

 private:
  sg4::SplitDuplexLink* duplex(sg4::NetZone* zone, const std::string& name, double bandwidth, double latency);
  sg4::Link* shared(sg4::NetZone* zone, const std::string& name, double bandwidth, double latency);
  sg4::Host* device(sg4::NetZone* zone, const std::string& name, int node);
  void build_single_node();
  void build_cpu_host();
  void build_cluster();
  std::pair<sg4::NetZone*, NetPoint*> build_leaf(sg4::NetZone* root, int leaf, const std::vector<NodeLinks>& links);
  void build_xml();

  // The links are built at what they achieve, not their line rate (cost_model.hpp, NetworkModel):
  // contention, the algorithm selector and link utilisation then all see the achievable rate.
  static PlatformSpec achieved(PlatformSpec spec) {
    const NetworkModel& network = spec.cost.network;
    if (spec.kind == PlatformKind::cpu_host) {
      spec.nvlink_bandwidth *= network.loopback_efficiency;
      spec.loopback_bandwidth *= network.loopback_efficiency;
    } else {
      spec.nvlink_bandwidth *= network.nvlink_efficiency;
      spec.nic_bandwidth *= network.nic_efficiency;
    }
    return spec;
  }

  const PlatformSpec spec_;
  BuiltPlatform built_;
};

sg4::SplitDuplexLink* Builder::duplex(sg4::NetZone* zone, const std::string& name, double bandwidth, double latency) {
  sg4::SplitDuplexLink* link = zone->create_split_duplex_link(name, bandwidth);
  link->set_latency(latency)->seal();
  built_.links.push_back(link->get_link_up());
  built_.links.push_back(link->get_link_down());
  return link;
}

sg4::Link* Builder::shared(sg4::NetZone* zone, const std::string& name, double bandwidth, double latency) {
  sg4::Link* link = zone->create_link(name, bandwidth)->set_latency(latency)->seal();
  built_.links.push_back(link);
  return link;
}

sg4::Host* Builder::device(sg4::NetZone* zone, const std::string& name, int node) {
  sg4::Host* host = zone->create_host(name, spec_.device.peak_for(core::DType::bfloat16))->seal();
  built_.devices.push_back(host);
  built_.node_of.push_back(node);
  return host;
}

void Builder::build_single_node() {
  sg4::NetZone* zone = sg4::create_star_zone("node0");
  for (int g = 0; g < spec_.gpus_per_node; ++g) {
    const std::string name = fmt::format("node0.gpu{}", g);
    sg4::Host* host = device(zone, name, 0);
    sg4::Link* nvlink = duplex(zone, name + ".nvlink", spec_.nvlink_bandwidth, spec_.nvlink_latency);
    zone->add_route(host->get_netpoint(), nullptr, nullptr, nullptr, {{nvlink, Direction::UP}}, true);
  }
  zone->seal();
}

void Builder::build_cpu_host() {
  sg4::NetZone* zone = sg4::create_star_zone("host");
  sg4::Link* memory = shared(zone, "host.memory", spec_.loopback_bandwidth, 0);
  for (int p = 0; p < spec_.gpus_per_node; ++p) {
    const std::string name = fmt::format("proc{}", p);
    sg4::Host* host = device(zone, name, 0);
    sg4::Link* loopback = duplex(zone, name + ".loopback", spec_.nvlink_bandwidth, spec_.nvlink_latency);
    // Up: own link then the shared one; the star zone drops the repeated shared link on the way
    // down, so a route crosses it once.
    zone->add_route(host->get_netpoint(), nullptr, nullptr, nullptr,
                    {{loopback, Direction::UP}, sg4::LinkInRoute(memory)}, true);
  }
  zone->seal();
}

// A zone holding one router: a switch, as a vertex of the root's graph.
std::pair<sg4::NetZone*, NetPoint*> switch_zone(sg4::NetZone* root, const std::string& name) {
  sg4::NetZone* zone = sg4::create_full_zone(name);
  zone->set_parent(root);
  NetPoint* router = zone->create_router(name + ".switch");
  zone->seal();
  return {zone, router};
}

// The GPUs of one leaf switch, their NVSwitches and the leaf switch. Returns the zone and the
// leaf switch, its gateway.
std::pair<sg4::NetZone*, NetPoint*> Builder::build_leaf(sg4::NetZone* root, int leaf,
                                                        const std::vector<NodeLinks>& links) {
  sg4::NetZone* zone = sg4::create_dijkstra_zone(fmt::format("leaf{}", leaf), true);
  zone->set_parent(root);
  NetPoint* leaf_switch = zone->create_router(fmt::format("leaf{}.switch", leaf));
  const int first = leaf * spec_.nodes_per_leaf;
  const int end = std::min(spec_.nodes, first + spec_.nodes_per_leaf);
  for (int n = first; n < end; ++n) {
    NetPoint* nvswitch = zone->create_router(fmt::format("node{}.nvswitch", n));
    for (int g = 0; g < spec_.gpus_per_node; ++g) {
      NetPoint* gpu = device(zone, fmt::format("node{}.gpu{}", n, g), n)->get_netpoint();
      zone->add_route(gpu, nvswitch, nullptr, nullptr, {{links[n].nvlink[g], Direction::UP}}, true);
      zone->add_route(gpu, leaf_switch, nullptr, nullptr,
                      {{links[n].nic[g], Direction::UP}, {links[n].port, Direction::UP}}, true);
    }
  }
  // Sealing walks every host created so far; sealing each leaf as soon as it is complete keeps
  // that walk to the hosts before it.
  zone->seal();
  return {zone, leaf_switch};
}

void Builder::build_cluster() {
  // The first zone created becomes SimGrid's root.
  sg4::NetZone* root = sg4::create_dijkstra_zone("cluster", true);
  const int leaves = (spec_.nodes + spec_.nodes_per_leaf - 1) / spec_.nodes_per_leaf;
  const double node_port = spec_.nic_bandwidth * (spec_.nic_per_gpu ? spec_.gpus_per_node : 1);
  const double uplink = node_port * spec_.nodes_per_leaf / spec_.oversubscription;

  // Every link first, all in the root zone. SimGrid 3.32 checks a new link's (and host's) name by
  // walking every zone of the platform; creating the links before the leaf zones exist keeps
  // that cheap. A route may use any zone's links.
  std::vector<NodeLinks> links(spec_.nodes);
  for (int n = 0; n < spec_.nodes; ++n) {
    const std::string node = fmt::format("node{}", n);
    sg4::Link* node_nic =
        spec_.nic_per_gpu ? nullptr : duplex(root, node + ".nic", spec_.nic_bandwidth, spec_.nic_latency);
    for (int g = 0; g < spec_.gpus_per_node; ++g) {
      const std::string gpu = fmt::format("{}.gpu{}", node, g);
      links[n].nvlink.push_back(duplex(root, gpu + ".nvlink", spec_.nvlink_bandwidth, spec_.nvlink_latency));
      links[n].nic.push_back(node_nic ? node_nic : duplex(root, gpu + ".nic", spec_.nic_bandwidth, spec_.nic_latency));
    }
    links[n].port = duplex(root, node + ".port", node_port, spec_.switch_latency / 2);
  }
  std::vector<sg4::Link*> uplinks;
  for (int l = 0; leaves > 1 && l < leaves; ++l)
    uplinks.push_back(duplex(root, fmt::format("leaf{}.uplink", l), uplink, spec_.switch_latency));

  std::vector<std::pair<sg4::NetZone*, NetPoint*>> leaf;
  for (int l = 0; l < leaves; ++l) leaf.push_back(build_leaf(root, l, links));
  if (leaves > 1) {
    const auto [spine, spine_switch] = switch_zone(root, "spine");
    for (int l = 0; l < leaves; ++l)
      root->add_route(leaf[l].first->get_netpoint(), spine->get_netpoint(), leaf[l].second, spine_switch,
                      {{uplinks[l], Direction::UP}}, true);
  }
  root->seal();
}

// "node10.gpu2" after "node9.gpu7": digit runs compare as numbers.
bool natural_less(const std::string& a, const std::string& b) {
  auto digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (!digit(a[i]) || !digit(b[j])) {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i, ++j;
      continue;
    }
    while (i + 1 < a.size() && a[i] == '0' && digit(a[i + 1])) ++i;  // leading zeros do not count
    while (j + 1 < b.size() && b[j] == '0' && digit(b[j + 1])) ++j;
    std::size_t ei = i, ej = j;
    while (ei < a.size() && digit(a[ei])) ++ei;
    while (ej < b.size() && digit(b[ej])) ++ej;
    if (ei - i != ej - j) return ei - i < ej - j;  // more digits: larger number
    if (int c = a.compare(i, ei - i, b, j, ej - j); c != 0) return c < 0;
    i = ei, j = ej;
  }
  if (a.size() - i != b.size() - j) return a.size() - i < b.size() - j;
  return a < b;  // equal but for leading zeros: any consistent order
}

void Builder::build_xml() {
  sg4::Engine* engine = sg4::Engine::get_instance();
  // Parse errors throw (simgrid::ParseError, std::invalid_argument); a few structural errors
  // abort the process inside SimGrid 3.32, which the simulator's forked child contains.
  try {
    engine->load_platform(spec_.xml_file);
  } catch (const std::exception& error) {
    throw core::InputError(fmt::format("{}: invalid SimGrid platform: {}", spec_.xml_file, error.what()));
  }
  std::vector<sg4::Host*> hosts = engine->get_all_hosts();
  if (hosts.empty()) throw core::InputError(fmt::format("{}: the platform has no hosts", spec_.xml_file));
  std::sort(hosts.begin(), hosts.end(),
            [](const sg4::Host* a, const sg4::Host* b) { return natural_less(a->get_name(), b->get_name()); });
  // Hosts of one zone form one node, numbered in device order.
  std::map<const sg4::NetZone*, int> nodes;
  for (sg4::Host* host : hosts) {
    auto [it, added] = nodes.try_emplace(host->get_englobing_zone(), static_cast<int>(nodes.size()));
    built_.devices.push_back(host);
    built_.node_of.push_back(it->second);
  }
  // Split-duplex links are listed with their two directions; the directions carry the traffic.
  std::vector<sg4::Link*> links;
  for (sg4::Link* link : engine->get_all_links())
    if (dynamic_cast<sg4::SplitDuplexLink*>(link) == nullptr && !link->get_name().starts_with("__"))
      links.push_back(link);
  std::sort(links.begin(), links.end(),
            [](const sg4::Link* a, const sg4::Link* b) { return natural_less(a->get_name(), b->get_name()); });
  built_.links = std::move(links);
}

BuiltPlatform Builder::build() {
  switch (spec_.kind) {
    case PlatformKind::node:
      build_single_node();
      break;
    case PlatformKind::cluster:
      build_cluster();
      break;
    case PlatformKind::cpu_host:
      build_cpu_host();
      break;
    case PlatformKind::xml:
      build_xml();
      break;
  }
  return std::move(built_);
}

}  // namespace

// Settings (simulators.md 4.3), each measured to matter:
//  - CM02: no latency/bandwidth correction factors (LV08 multiplies latency by 13.01 and
//    bandwidth by 0.97), and weight-S 0.
//  - crosstraffic 0: otherwise every flow also loads the reverse direction of its route with
//    acknowledgement traffic (+9 % on a ring).
//  - TCP-gamma 1e15: the TCP window bound gamma / (2 * latency) caps flows at ~2 GB/s with the
//    default 4 MiB at microsecond latencies; 3.32 cannot disable it (0 works from 3.34 only).
// Left as is: CM02 still weights max-min shares by route latency (TCP RTT-unfairness), which only
// matters when flows of different route latencies share a link.
void configure_simgrid(sg4::Engine& engine) {
  // Quiet first, so that the configuration changes below are not logged either.
  xbt_log_control_set("root.thres:critical");
  engine.set_config("network/model:CM02");
  engine.set_config("network/crosstraffic:0");
  engine.set_config("network/TCP-gamma:1e15");
}

BuiltPlatform build_platform(const PlatformSpec& spec) { return Builder(spec).build(); }

}  // namespace stratsim::sim
