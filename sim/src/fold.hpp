// Folding: rank symmetry across nodes, so representative mode does not pay for every node.
//
// Representative mode simulates one rank's ops but still launches every group instance, so a
// world-sized collective on 16,384 GPUs starts 16,384 SimGrid flows per phase. On a generated
// cluster every node is identical, and an SPMD program's traffic is invariant under a shift by a
// whole number of nodes whenever its groups are (the world, DP rails across nodes, TP inside a
// node). Folding simulates K of the N nodes with periodic boundaries, like a physics code on a
// torus: rank r of the full job stands for simulated rank r mod (K x GPUs per node), a group
// instance folds onto the simulated ranks its members map to, and a folded instance's schedule
// closes its rings over those ranks while moving the full group's chunks for its full latency
// steps (collective.hpp, build_folded_schedule). Every simulated link then carries the images of
// exactly the flows it carries in the full job, so max-min sharing gives the same rates: the
// timings are those of the full simulation (tests compare both).
//
// It holds when
//   * the platform is a generated cluster, the job fills whole nodes, and K divides the node count;
//   * K spans at least two leaf switches (a multiple of nodes_per_leaf) when the job spans more
//     than one leaf, so a flow that crosses the spine still crosses it after the fold;
//   * every group folds periodically: member i of a full instance maps onto member i mod p' of one
//     simulated instance (p' = p x K / N), and a simulated instance's members span fewer than K
//     nodes, so no two nodes of one instance land on the same simulated node;
//   * every collective on a group that folds (p' < p) runs an algorithm that folds (ring,
//     hierarchical, double binary tree all-reduce; not direct, rhd or all-to-all).
// The smallest such K is taken; when none exists the simulation runs unfolded and says why.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "stratsim/core/program.hpp"
#include "stratsim/sim/collective.hpp"
#include "stratsim/sim/platform.hpp"

namespace stratsim::sim::detail {

// One program group as the simulation runs it.
struct SimulatedGroup {
  int full_size = 1;                         // members of every full instance
  std::vector<std::vector<int>> instances;   // simulated instances: their ranks, in group order
  std::vector<std::vector<int>> stands_for;  // per simulated instance: the full instances it stands for
};

struct Folding {
  int nodes = 0;                       // simulated nodes; 0 when the network is not folded
  int total_nodes = 0;                 // nodes the job spans
  int ranks = 0;                       // simulated ranks (the program's world size when not folded)
  std::string note;                    // why a cluster run was not folded ("" when folded or not applicable)
  std::vector<SimulatedGroup> groups;  // per program group
};

// Every instance simulated as itself.
Folding no_folding(const core::Program& program);

// The algorithm a collective op runs on full instance `full_instance` of its group
// (DeviceMesh::all_groups order).
using AlgorithmOf = std::function<Algorithm(const core::ProgramOp& op, int full_instance)>;

// The smallest valid fold of the program onto the platform (see above), or no_folding with a note.
// Call only for representative mode on the platform the program runs on.
Folding plan_folding(const core::Program& program, const PlatformSpec& platform, const AlgorithmOf& algorithm_of);

}  // namespace stratsim::sim::detail
