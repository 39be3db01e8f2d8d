// The simulation proper: SimGrid actors execute the program's streams on the platform's hosts.
//
// One actor per (simulated rank, stream) walks that stream's ops in order. Before an op it waits
// for the op's cross-stream dependencies on the same rank (a condition variable per rank, woken
// whenever an op of that rank finishes). Compute ops take the roofline time; collectives go
// through a rendezvous per (op, group instance): the last member to arrive runs the algorithm's
// schedule as SimGrid flows, everyone else blocks until it completes. That is NCCL's behaviour:
// a collective cannot progress before every member has launched it, so skew propagates.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <unistd.h>
#include <xbt/log.h>
#include <simgrid/s4u.hpp>

#include "engine.hpp"
#include "fold.hpp"
#include "stratsim/core/errors.hpp"

namespace sg4 = simgrid::s4u;

XBT_LOG_EXTERNAL_CATEGORY(root);

namespace stratsim::sim::detail {
namespace {

using core::CollectiveKind;
using core::OpType;
using core::Program;
using core::ProgramOp;

// A collective waiting for its members: created by the first arrival, run by the last.
struct Rendezvous {
  int arrived = 0;
  int expected = 1;
  bool done = false;
  double start = 0, end = 0;
  const Protocol* protocol = nullptr;  // what the driver ran under the cost model
  sg4::ConditionVariablePtr finished = sg4::ConditionVariable::create();
};

// Draws "[#####     ] 52% ops" on stderr at most five times a second.
class ProgressBar {
 public:
  ProgressBar(bool enabled, std::int64_t total) : enabled_(enabled && total > 0), total_(total) {}
  void advance() {
    ++done_;
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (done_ != total_ && now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    const int width = 30;
    const int filled = static_cast<int>(width * done_ / total_);
    std::fprintf(stderr, "\rsimulating [%s%s] %3d%% (%lld/%lld ops, t=%.6f s)", std::string(filled, '#').c_str(),
                 std::string(width - filled, ' ').c_str(), static_cast<int>(100 * done_ / total_),
                 static_cast<long long>(done_), static_cast<long long>(total_), sg4::Engine::get_clock());
    if (done_ == total_) std::fprintf(stderr, "\n");
  }

 private:
  bool enabled_;
  std::int64_t total_;
  std::int64_t done_ = 0;
  std::chrono::steady_clock::time_point last_{};
};

// Says the simulation's own figures where core's reports print a producer's notes (SimResult).
void annotate(SimResult& result) {
  if (result.rank_mode == RankMode::representative) {
    if (result.folded_nodes > 0)
      result.mode_notes.push_back(
          fmt::format("network folded onto {} of {} nodes by node symmetry", result.folded_nodes, result.total_nodes));
    else if (!result.fold_note.empty()) result.mode_notes.push_back("network " + result.fold_note);
  }
  result.notes.push_back(fmt::format("{} SimGrid flows", result.flows));
  result.extra = {{"folded_nodes", result.folded_nodes}, {"total_nodes", result.total_nodes}};
  if (!result.fold_note.empty()) result.extra["fold_note"] = result.fold_note;
}

class Simulation {
 public:
  Simulation(const Program& program, const PlatformSpec& platform, const SimOptions& options, BuiltPlatform built)
      : program_(program),
        platform_(platform),
        options_(options),
        built_(std::move(built)),
        progress_(options.progress, 0) {}

  SimResult run(RankMode mode);

 private:
  struct SimRank {
    std::vector<int> ranks;  // the ranks it stands for
    sg4::Host* host = nullptr;
    double slowdown = 1.0;
    int collectives_in_flight = 0;  // issued and not finished: their kernels hold SMs (interference)
    bool computing = false;         // a compute op is running
    std::size_t compute_next = 0;   // position in the compute stream: the op running or waited for
    std::vector<char> done;         // per op
    std::vector<OpTiming> timings;
    sg4::ConditionVariablePtr op_finished = sg4::ConditionVariable::create();
  };

  void layout_ranks(RankMode mode);
  void measure_link_costs();
  void run_stream(int sim_rank, int stream);
  void wait_for_dependencies(SimRank& rank, const ProgramOp& op);
  void run_compute(SimRank& rank, const ProgramOp& op);
  void run_collective(int sim_rank, const ProgramOp& op);
  std::vector<int> instances_of(const SimRank& rank, const ProgramOp& op) const;
  bool compute_busy(const SimRank& rank) const;
  int members_simulated(const ProgramOp& op) const;
  void drive_instances(const ProgramOp& op, const std::vector<int>& instances, double slowdown);
  void drive_instance(const ProgramOp& op, int instance, double slowdown);
  double one_rank_copy_seconds(const ProgramOp& op) const;
  const Protocol* protocol_for(const ProgramOp& op, int instance, Algorithm algorithm, const Schedule& schedule,
                               const std::vector<int>& member_nodes);
  const Protocol* tuner_protocol(const ProgramOp& op, int instance, Algorithm algorithm);
  void record(const ProgramOp& op, int instance, Algorithm algorithm, const Protocol* protocol, double start,
              double end);
  const std::vector<int>& group_members(const ProgramOp& op, int instance) const {
    return folding_.groups[op.group].instances.at(instance);
  }
  const std::vector<std::vector<int>>& full_instances(int group);
  std::vector<int> nodes_of(const std::vector<int>& ranks) const;
  bool node_local(int group);
  // The links a flow between two hosts crosses and their summed latency, looked up once.
  struct Route {
    std::vector<sg4::Link*> links;
    double latency = 0;
  };
  const Route& route(sg4::Host* from, sg4::Host* to);
  const Schedule& schedule_for(const ProgramOp& op, Algorithm algorithm, const std::vector<int>& member_nodes);
  Algorithm algorithm_for(const ProgramOp& op, int instance);
  std::optional<Algorithm> forced_algorithm(core::CollectiveKind kind) const;
  void check_forced_algorithms();
  Algorithm algorithm_for_full(const ProgramOp& op, int full_instance);
  void run_flows(const std::vector<sg4::Host*>& hosts, std::span<const Flow> flows, double scale);
  const Protocol* measured_entry(const ProgramOp& op) const;
  int nodes_spanned(const ProgramOp& op, int instance);
  void run_schedule(const Schedule& schedule, const std::vector<sg4::Host*>& hosts,
                    const std::vector<int>& member_nodes, const Protocol* protocol, double scale, double nvls_scale,
                    bool steps = true);
  void run_measured(const ProgramOp& op, const MeasuredCurve& curve, const Schedule& schedule,
                    const std::vector<sg4::Host*>& hosts, const std::vector<int>& member_nodes, double slowdown);
  void finish_op(SimRank& rank, const ProgramOp& op, const OpTiming& timing);
  SimResult collect(RankMode mode);

  const Program& program_;
  const PlatformSpec& platform_;
  const SimOptions& options_;
  BuiltPlatform built_;
  ProgressBar progress_;

  std::vector<SimRank> sim_ranks_;
  std::vector<std::vector<int>> stream_ops_;
  sg4::MutexPtr lock_ = sg4::Mutex::create();  // actors are cooperative; the lock only feeds the condition variables
  std::map<std::pair<int, int>, std::unique_ptr<Rendezvous>> rendezvous_;
  std::vector<CollectiveRun> runs_;
  LinkCosts costs_;
  std::map<std::pair<sg4::Host*, sg4::Host*>, Route> routes_;  // lookups only: pointer order is harmless
  // Bytes each link carried: every flow adds its bytes to the links of its route. (SimGrid's
  // link-load plugin would integrate the same, but it attaches to links only as the public API
  // creates them, so the directions of an XML <cluster>'s links have none and tracking them
  // crashes SimGrid 3.32.)
  std::map<const sg4::Link*, double> link_bytes_;
  Folding folding_;                                  // the simulated group instances
  std::vector<std::vector<std::vector<int>>> full_;  // per program group: every full instance's ranks
  std::vector<int> node_local_;                      // per program group: -1 unknown, 0 or 1
  std::map<std::tuple<int, int, double, int, std::vector<int>>, Schedule> schedule_cache_;
  std::map<std::tuple<int, double, int, int>, Algorithm> algorithm_cache_;  // kind, bytes, group, full instance
  std::map<const Schedule*, const Protocol*> protocol_cache_;
  // NCCL's tuner's protocol for an algorithm on a full instance (null: the tuner does not apply).
  std::map<std::tuple<int, double, int, int, int>, const Protocol*> tuner_protocol_cache_;
  std::map<const Schedule*, ScheduleCost> flows_cost_cache_;  // a measured curve's flows alone, per schedule //
                                                              // schedule_cache_ entries are stable
  std::int64_t flows_ = 0;
  // The first flow an XML platform has no path for ("gpu0 to gpu1"): SimGrid would abort on its
  // send, so it is skipped and the run ends in an InputError naming the file.
  std::string missing_route_;
  // A CPU host with fewer cores than rank processes: ranks compute at the same time (SPMD), so
  // each gets cores / processes of a core.
  double host_contention_ = 1;
  DeviceSpec device_;  // the platform's device, its memory bandwidth shared on a CPU host
};

void Simulation::layout_ranks(RankMode mode) {
  const int world = program_.world_size;
  if (mode == RankMode::representative) {
    SimRank rank;
    for (int r = 0; r < world; ++r) rank.ranks.push_back(r);
    sim_ranks_.push_back(std::move(rank));
  } else {
    for (int r = 0; r < world; ++r) {
      SimRank rank;
      rank.ranks = {r};
      sim_ranks_.push_back(std::move(rank));
    }
  }
  for (SimRank& rank : sim_ranks_) {
    rank.host = built_.devices[rank.ranks.front()];
    if (auto it = options_.stragglers.find(rank.ranks.front()); it != options_.stragglers.end())
      rank.slowdown = it->second;
    rank.done.assign(program_.ops.size(), 0);
    rank.timings.assign(program_.ops.size(), OpTiming{});
  }
}

// Alpha-beta figures for the algorithm selector, read off the built platform: one route between
// two devices of a node, one between devices of different nodes.
void Simulation::measure_link_costs() {
  auto route_cost = [](sg4::Host* a, sg4::Host* b, double& alpha, double& beta) {
    std::vector<sg4::Link*> links;
    double latency = 0;
    a->route_to(b, links, &latency);
    double bandwidth = 0;
    for (sg4::Link* link : links)
      bandwidth = bandwidth == 0 ? link->get_bandwidth() : std::min(bandwidth, link->get_bandwidth());
    alpha = latency;
    beta = bandwidth > 0 ? 1.0 / bandwidth : 0;
  };
  const auto& devices = built_.devices;
  bool intra = false, inter = false;
  for (std::size_t i = 1; i < devices.size() && !(intra && inter); ++i) {
    if (!intra && built_.node_of[i] == built_.node_of[0]) {
      route_cost(devices[0], devices[i], costs_.alpha_intra, costs_.beta_intra);
      intra = true;
    } else if (!inter && built_.node_of[i] != built_.node_of[0]) {
      route_cost(devices[0], devices[i], costs_.alpha_inter, costs_.beta_inter);
      inter = true;
    }
  }
  if (!intra) costs_.alpha_intra = costs_.alpha_inter, costs_.beta_intra = costs_.beta_inter;
  if (!inter) costs_.alpha_inter = costs_.alpha_intra, costs_.beta_inter = costs_.beta_intra;
  // NVLS needs an NVSwitch that reduces: a generated GPU node whose cost model says it can.
  const NetworkModel& network = platform_.cost.network;
  if (network.nvls_bandwidth_fraction > 0 && intra &&
      (platform_.kind == PlatformKind::node || platform_.kind == PlatformKind::cluster)) {
    costs_.nvls_launch = network.nvls_base_latency;
    costs_.nvls_tree_launch = network.nvls_tree_launch();
    costs_.nvls_first_loop_fraction = network.nvls_first_loop_fraction;
    costs_.nvls_first_loop_bytes = network.nvls_first_loop_bytes;
    costs_.nvls_beta = costs_.beta_intra / network.nvls_bandwidth_fraction;
    costs_.nvls_tree_beta = costs_.beta_intra / network.nvls_tree_fraction();
  }
}

SimResult Simulation::run(RankMode mode) {
  if (platform_.kind == PlatformKind::cpu_host && platform_.cores > 0 && program_.world_size > platform_.cores)
    host_contention_ = static_cast<double>(program_.world_size) / platform_.cores;
  // SPMD ranks stream memory at the same time: each gets its share of the host's DRAM.
  device_ = platform_.device;
  if (platform_.kind == PlatformKind::cpu_host && platform_.host_memory_bandwidth > 0)
    device_.memory_bandwidth =
        std::min(device_.memory_bandwidth, platform_.host_memory_bandwidth / program_.world_size * host_contention_);
  // ... and compute at the same time: GEMMs at the rates measured with the ranks busy.
  device_.ranks_computing = platform_.kind == PlatformKind::cpu_host ? program_.world_size : 1;
  layout_ranks(mode);
  measure_link_costs();
  check_forced_algorithms();
  folding_ = mode == RankMode::representative && options_.fold
                 ? plan_folding(program_, platform_,
                                [this](const ProgramOp& op, int full) { return algorithm_for_full(op, full); })
                 : no_folding(program_);
  stream_ops_.assign(program_.streams.size(), {});
  for (const ProgramOp& op : program_.ops) stream_ops_[op.stream].push_back(op.id);
  progress_ = ProgressBar(options_.progress, static_cast<std::int64_t>(sim_ranks_.size() * program_.ops.size()));
  for (int s = 0; s < static_cast<int>(sim_ranks_.size()); ++s)
    for (int stream = 0; stream < static_cast<int>(program_.streams.size()); ++stream) {
      if (stream_ops_[stream].empty()) continue;
      sg4::Actor::create(fmt::format("rank{}.{}", sim_ranks_[s].ranks.front(), program_.streams[stream]),
                         sim_ranks_[s].host, [this, s, stream] { run_stream(s, stream); });
    }
  sg4::Engine::get_instance()->run();
  if (!missing_route_.empty())
    throw core::InputError(fmt::format(
        "{}: no route from {}: expected a path between every two hosts whose ranks communicate (a <route> for each "
        "pair under routing=\"Full\")",
        platform_.xml_file.empty() ? "the platform" : platform_.xml_file, missing_route_));
  return collect(mode);
}

void Simulation::run_stream(int sim_rank, int stream) {
  SimRank& rank = sim_ranks_[sim_rank];
  for (int id : stream_ops_[stream]) {
    const ProgramOp& op = program_.ops[id];
    if (stream == 0) ++rank.compute_next;
    wait_for_dependencies(rank, op);
    if (op.type == OpType::compute) run_compute(rank, op);
    else run_collective(sim_rank, op);
  }
}

void Simulation::wait_for_dependencies(SimRank& rank, const ProgramOp& op) {
  std::unique_lock<sg4::Mutex> lock(*lock_);
  for (int dep : op.deps)
    while (!rank.done[dep]) rank.op_finished->wait(lock);
}

void Simulation::run_compute(SimRank& rank, const ProgramOp& op) {
  OpTiming timing;
  timing.issue = timing.start = sg4::Engine::get_clock();
  // Interference is judged when the op starts: a kernel launched beside a running NCCL kernel
  // shares the SMs with it for (most of) its life.
  const double interference =
      (rank.collectives_in_flight > 0 ? platform_.cost.interference.compute_slowdown : 1.0) * host_contention_;
  const double duration = platform_.cost.compute.duration(op, device_) * rank.slowdown * interference;
  rank.computing = true;
  if (duration > 0) sg4::this_actor::sleep_for(duration);
  rank.computing = false;
  timing.end = sg4::Engine::get_clock();
  finish_op(rank, op, timing);
}

bool Simulation::compute_busy(const SimRank& rank) const {
  if (rank.computing) return true;
  if (stream_ops_.empty() || rank.compute_next == 0 || rank.compute_next > stream_ops_[0].size()) return false;
  const ProgramOp& next = program_.ops[stream_ops_[0][rank.compute_next - 1]];
  if (rank.done[next.id]) return false;  // the stream is past its last op
  return std::all_of(next.deps.begin(), next.deps.end(), [&](int dep) { return rank.done[dep] != 0; });
}

// The group instances this simulated rank takes part in: its own in full mode, all of them in
// representative mode (it stands for every rank).
std::vector<int> Simulation::instances_of(const SimRank& rank, const ProgramOp& op) const {
  std::vector<int> instances;
  if (rank.ranks.size() == 1) {
    instances.push_back(program_.group_index(op.group, rank.ranks.front()));
    return instances;
  }
  const int count = static_cast<int>(folding_.groups[op.group].instances.size());
  for (int i = 0; i < count; ++i) instances.push_back(i);
  return instances;
}

// How many simulated ranks must arrive before the instance can start.
int Simulation::members_simulated(const ProgramOp& op) const {
  if (sim_ranks_.size() == 1) return 1;
  return program_.groups[op.group].size;
}

void Simulation::run_collective(int sim_rank, const ProgramOp& op) {
  SimRank& rank = sim_ranks_[sim_rank];
  OpTiming timing;
  timing.issue = sg4::Engine::get_clock();
  // A group of one runs no communication kernel (at most a local copy): nothing shares the SMs.
  const bool communicates = folding_.groups[op.group].full_size > 1;
  if (communicates) ++rank.collectives_in_flight;
  const std::vector<int> instances = instances_of(rank, op);
  std::vector<int> to_drive;
  for (int instance : instances) {
    auto it = rendezvous_.find({op.id, instance});
    if (it == rendezvous_.end()) {
      // Creating the condition variable is a simcall, so other actors run meanwhile and may
      // create the same rendezvous: build it first, insert only if still absent.
      auto fresh = std::make_unique<Rendezvous>();
      fresh->expected = members_simulated(op);
      it = rendezvous_.try_emplace({op.id, instance}, std::move(fresh)).first;
    }
    if (++it->second->arrived == it->second->expected) to_drive.push_back(instance);
  }
  // The last member to arrive drives the instance; its compute stream decides interference: busy
  // now, or about to be (its next op's dependencies are met: backward goes on beside a bucket).
  const double slowdown = compute_busy(rank) ? platform_.cost.interference.communication_slowdown : 1.0;
  if (!to_drive.empty()) drive_instances(op, to_drive, slowdown);
  double start = 0, end = 0;
  for (int instance : instances) {
    Rendezvous& slot = *rendezvous_.at({op.id, instance});
    {
      std::unique_lock<sg4::Mutex> lock(*lock_);
      while (!slot.done) slot.finished->wait(lock);
    }
    start = std::max(start, slot.start);
    end = std::max(end, slot.end);
    if (--slot.arrived == 0) rendezvous_.erase({op.id, instance});
  }
  timing.start = start;
  timing.end = end;
  if (communicates) --rank.collectives_in_flight;
  finish_op(rank, op, timing);
}

// Runs several instances at once: one actor each so their flows share the network concurrently,
// then waits for all of them (node-local instances in representative mode: one, copied).
void Simulation::drive_instances(const ProgramOp& op, const std::vector<int>& instances, double slowdown) {
  if (instances.size() == 1) {
    drive_instance(op, instances.front(), slowdown);
    return;
  }
  if (sim_ranks_.size() == 1 && node_local(op.group)) {
    // Every instance lives inside its own node and touches only that node's links, and in
    // representative mode every node sees the same traffic: run one, copy its times to the rest.
    drive_instance(op, instances.front(), slowdown);
    const Rendezvous& first = *rendezvous_.at({op.id, instances.front()});
    const Algorithm algorithm = algorithm_for(op, instances.front());
    for (std::size_t i = 1; i < instances.size(); ++i) {
      Rendezvous& slot = *rendezvous_.at({op.id, instances[i]});
      slot.start = first.start;
      slot.end = first.end;
      slot.done = true;
      record(op, instances[i], algorithm, first.protocol, slot.start, slot.end);
    }
    return;
  }
  std::vector<sg4::ActorPtr> drivers;
  drivers.reserve(instances.size());
  for (int instance : instances) {
    sg4::Host* host = built_.devices[group_members(op, instance).front()];
    drivers.push_back(sg4::Actor::create(fmt::format("op{}.g{}", op.id, instance), host,
                                         [this, &op, instance, slowdown] { drive_instance(op, instance, slowdown); }));
  }
  for (const sg4::ActorPtr& driver : drivers) driver->join();
}

// True when every instance of the group lies inside one node and no two share a node, on a
// generated platform (where intra-node routes use only that node's links): the instances are then
// link-disjoint copies of each other.
bool Simulation::node_local(int group) {
  if (node_local_.empty()) node_local_.assign(program_.groups.size(), -1);
  if (node_local_[group] >= 0) return node_local_[group] == 1;
  bool local = platform_.kind != PlatformKind::xml && platform_.kind != PlatformKind::cpu_host;
  std::vector<char> node_used(built_.devices.size(), 0);
  for (const auto& members : folding_.groups[group].instances) {
    if (!local) break;
    const int node = built_.node_of[members.front()];
    for (int rank : members) local = local && built_.node_of[rank] == node;
    local = local && !node_used[node];
    node_used[node] = 1;
  }
  node_local_[group] = local ? 1 : 0;
  return local;
}

// Every full instance of a program group, as DeviceMesh::all_groups lists them; computed once.
const std::vector<std::vector<int>>& Simulation::full_instances(int group) {
  if (full_.empty()) full_.resize(program_.groups.size());
  auto& instances = full_[group];
  if (instances.empty()) instances = program_.all_groups(group);
  return instances;
}

// The node of each rank, in the ranks' order: what algorithm selection and the schedules read.
std::vector<int> Simulation::nodes_of(const std::vector<int>& ranks) const {
  std::vector<int> nodes;
  nodes.reserve(ranks.size());
  for (int rank : ranks) nodes.push_back(built_.node_of[rank]);
  return nodes;
}

const Simulation::Route& Simulation::route(sg4::Host* from, sg4::Host* to) {
  auto [it, inserted] = routes_.try_emplace({from, to});
  if (inserted) from->route_to(to, it->second.links, &it->second.latency);
  return it->second;
}

// The user's --algorithm for the kind, else the library's fixed choice (Gloo); none: NCCL's tuner.
std::optional<Algorithm> Simulation::forced_algorithm(core::CollectiveKind kind) const {
  if (auto it = options_.algorithms.find(kind); it != options_.algorithms.end() && it->second != Algorithm::automatic)
    return it->second;  // simulate() checked that the platform can run it
  if (auto it = platform_.cost.network.algorithms.find(kind); it != platform_.cost.network.algorithms.end())
    return it->second;
  return std::nullopt;
}

// A forced algorithm must fit every group instance it runs on (hierarchical needs several nodes,
// nvls one): an input error before the run, since thrown inside a simulated actor it would abort
// SimGrid. Once per group and kind, whatever the number of ops.
void Simulation::check_forced_algorithms() {
  std::set<std::pair<int, int>> checked;
  for (const ProgramOp& op : program_.ops) {
    if (op.type != OpType::collective || program_.groups[op.group].size < 2) continue;
    const std::optional<Algorithm> algorithm = forced_algorithm(op.kind);
    if (!algorithm || !checked.emplace(op.group, static_cast<int>(op.kind)).second) continue;
    for (const std::vector<int>& members : full_instances(op.group)) {
      try {
        check_fits(op.kind, *algorithm, nodes_of(members));
      } catch (const std::invalid_argument& error) {
        throw core::InputError(
            fmt::format("{} (op {} \"{}\", group {})", error.what(), op.id, op.name, program_.groups[op.group].name));
      }
    }
  }
}

// The algorithm a full group instance runs, chosen once per (kind, bytes, group, instance) for
// both the fold planner and the engine (a folded instance runs what the full one would).
Algorithm Simulation::algorithm_for_full(const ProgramOp& op, int full_instance) {
  if (program_.groups[op.group].size < 2) return Algorithm::ring;  // nothing moves
  if (const std::optional<Algorithm> forced = forced_algorithm(op.kind)) return *forced;
  const auto key = std::make_tuple(static_cast<int>(op.kind), static_cast<double>(op.bytes), op.group, full_instance);
  auto it = algorithm_cache_.find(key);
  if (it != algorithm_cache_.end()) return it->second;
  const Algorithm chosen = select_algorithm(op.kind, nodes_of(full_instances(op.group)[full_instance]),
                                            static_cast<double>(op.bytes), costs_, &platform_.cost.network);
  return algorithm_cache_.emplace(key, chosen).first->second;
}

Algorithm Simulation::algorithm_for(const ProgramOp& op, int instance) {
  return algorithm_for_full(op, folding_.groups[op.group].stands_for[instance].front());
}

const Schedule& Simulation::schedule_for(const ProgramOp& op, Algorithm algorithm,
                                         const std::vector<int>& member_nodes) {
  const int full_size = folding_.groups[op.group].full_size;
  auto key = std::make_tuple(static_cast<int>(op.kind), static_cast<int>(algorithm), static_cast<double>(op.bytes),
                             full_size, member_nodes);
  auto it = schedule_cache_.find(key);
  if (it == schedule_cache_.end()) {
    try {
      it = schedule_cache_
               .emplace(key, build_folded_schedule(op.kind, algorithm, member_nodes, full_size,
                                                   static_cast<double>(op.bytes)))
               .first;
    } catch (const std::invalid_argument& error) {
      throw core::InputError(fmt::format("{} (op {} \"{}\")", error.what(), op.id, op.name));
    }
  }
  return it->second;
}

// The cost model's own entry for the op's kind (network.per_kind): for its dtype first (Gloo
// reduces half precision in software), else for the kind; null when it has none.
const Protocol* Simulation::measured_entry(const ProgramOp& op) const {
  const NetworkModel& network = platform_.cost.network;
  if (auto it = network.per_kind_dtype.find({op.kind, op.dtype}); it != network.per_kind_dtype.end())
    return &it->second;
  if (auto it = network.per_kind.find(op.kind); it != network.per_kind.end()) return &it->second;
  return nullptr;
}

// The nodes a full instance of the op's group spans: a measured curve holds for its own shape.
int Simulation::nodes_spanned(const ProgramOp& op, int instance) {
  const SimulatedGroup& group = folding_.groups[op.group];
  std::set<int> nodes;
  for (int rank : full_instances(op.group)[group.stands_for[instance].front()])
    nodes.insert(folding_.nodes > 0 ? rank / platform_.gpus_per_node : built_.node_of[rank]);
  return static_cast<int>(nodes.size());
}

// The protocol NCCL's tuner pairs with `algorithm` on the op's full group (NCCL_ALGO set, it still
// picks the protocol), where the model has a tuner that applies to the group; else null.
const Protocol* Simulation::tuner_protocol(const ProgramOp& op, int instance, Algorithm algorithm) {
  const NetworkModel& network = platform_.cost.network;
  if (!network.tuner) return nullptr;
  const int full_instance = folding_.groups[op.group].stands_for[instance].front();
  const auto key = std::make_tuple(static_cast<int>(op.kind), static_cast<double>(op.bytes), op.group, full_instance,
                                   static_cast<int>(algorithm));
  auto [it, inserted] = tuner_protocol_cache_.try_emplace(key, nullptr);
  if (inserted) {
    const std::optional<TunerChoice> choice =
        nccl_tuner_choice(*network.tuner, op.kind, nodes_of(full_instances(op.group)[full_instance]),
                          static_cast<double>(op.bytes), costs_, algorithm);
    if (choice) it->second = find_protocol(network, kNcclProtocolNames.name(choice->protocol));
  }
  return it->second;
}

// The NCCL protocol a collective runs under the cost model: a measured entry's, else the tuner's,
// else the one with the lowest estimate for its schedule (chosen once per schedule).
const Protocol* Simulation::protocol_for(const ProgramOp& op, int instance, Algorithm algorithm,
                                         const Schedule& schedule, const std::vector<int>& member_nodes) {
  if (const Protocol* entry = measured_entry(op); entry && entry->has_line) return entry;
  if (const Protocol* tuned = tuner_protocol(op, instance, algorithm)) return tuned;
  auto [it, inserted] = protocol_cache_.try_emplace(&schedule, nullptr);
  if (inserted) {
    const ScheduleCost cost = estimate_parts(schedule, member_nodes, costs_);
    it->second = choose_protocol(platform_.cost.network, static_cast<double>(op.bytes), cost);
  }
  return it->second;
}

// One group instance: the launch overhead, then each phase's flows together, then the phase's
// remaining latency steps. Under a protocol (cost_model.hpp) the flows carry bytes / fraction on
// the wire, each step adds the protocol's latency, and its base latency replaces the overhead.
void Simulation::drive_instance(const ProgramOp& op, int instance, double slowdown) {
  const std::vector<int>& members = group_members(op, instance);
  std::vector<sg4::Host*> hosts;
  for (int rank : members) hosts.push_back(built_.devices[rank]);
  const std::vector<int> member_nodes = nodes_of(members);
  Rendezvous& slot = *rendezvous_.at({op.id, instance});
  slot.start = sg4::Engine::get_clock();
  const Algorithm algorithm = algorithm_for(op, instance);
  const Schedule* schedule =
      folding_.groups[op.group].full_size > 1 ? &schedule_for(op, algorithm, member_nodes) : nullptr;
  // A measured curve is the collective's whole time, whatever the algorithm. Otherwise NVLS and
  // NVLSTree run their own way: NVLS's launch, and NVLSTree's trees under Simple (no protocol
  // choice); everything else under the protocol NCCL would pick.
  const bool nvls = algorithm == Algorithm::nvls || algorithm == Algorithm::nvls_tree;
  const NetworkModel& network = platform_.cost.network;
  const Protocol* entry = schedule ? measured_entry(op) : nullptr;
  const MeasuredCurve* curve =
      entry && !entry->measured.empty()
          ? entry->measured_on(folding_.groups[op.group].full_size, nodes_spanned(op, instance))
          : nullptr;
  const Protocol* protocol = curve                               ? entry
                             : !schedule                         ? nullptr
                             : algorithm == Algorithm::nvls_tree ? nvls_protocol(network)
                             : !nvls ? protocol_for(op, instance, algorithm, *schedule, member_nodes)
                                     : nullptr;
  slot.protocol = protocol;
  const double overhead = curve                               ? 0
                          : algorithm == Algorithm::nvls      ? network.nvls_base_latency
                          : algorithm == Algorithm::nvls_tree ? network.nvls_tree_launch()
                          : protocol                          ? protocol->base_latency
                                                              : platform_.collective_overhead;
  if (overhead > 0) sg4::this_actor::sleep_for(overhead);
  if (!schedule) {
    const double copy = one_rank_copy_seconds(op) * slowdown;
    if (copy > 0) sg4::this_actor::sleep_for(copy);
  } else if (curve) {
    run_measured(op, *curve, *schedule, hosts, member_nodes, slowdown);
  } else {
    // On a CPU host with fewer cores than ranks, the transport threads share the cores too.
    const double scale = slowdown * host_contention_;
    const double nvls_fraction =
        algorithm == Algorithm::nvls_tree ? network.nvls_tree_fraction() : network.nvls_bandwidth_fraction;
    run_schedule(*schedule, hosts, member_nodes, protocol, scale / (protocol ? protocol->bandwidth_fraction : 1.0),
                 nvls_fraction > 0 ? scale / nvls_fraction : scale);
    // NVLS's first loop, at the idle link's rate like a pipeline's fill.
    if (algorithm == Algorithm::nvls) {
      const int members = static_cast<int>(member_nodes.size());
      const double first_loop = nvls_first_loop_seconds(members, static_cast<double>(op.bytes), costs_) * scale;
      if (first_loop > 0) sg4::this_actor::sleep_for(first_loop);
    }
  }
  slot.end = sg4::Engine::get_clock();
  record(op, instance, algorithm, protocol, slot.start, slot.end);
  std::unique_lock<sg4::Mutex> lock(*lock_);
  slot.done = true;
  slot.finished->notify_all();
}

// A schedule's flows, each carrying `scale` times its bytes (`nvls_scale` in NVLS phases), then
// (with `steps`) each phase's remaining latency steps (the route's latency, and the protocol's per
// step outside NVLS phases): phase after phase, or, pipelined, every phase's flows at once and the
// latency steps after them (collective.hpp, Schedule::pipelined).
void Simulation::run_schedule(const Schedule& schedule, const std::vector<sg4::Host*>& hosts,
                              const std::vector<int>& member_nodes, const Protocol* protocol, double scale,
                              double nvls_scale, bool steps) {
  std::vector<Flow> pipeline;
  double pipeline_wait = 0;
  for (const SchedulePhase& phase : schedule.phases) {
    const double phase_scale = phase.nvls ? nvls_scale : scale;
    double alpha = 0;
    bool crosses_nodes = false;
    for (const Flow& flow : phase.flows) {
      crosses_nodes = crosses_nodes || member_nodes[flow.src] != member_nodes[flow.dst];
      if (phase.latency_steps > 1) alpha = std::max(alpha, route(hosts[flow.src], hosts[flow.dst]).latency);
    }
    double wait = steps ? (phase.latency_steps - 1) * alpha : 0;
    if (steps && protocol && !phase.flows.empty() && !phase.nvls)
      wait += phase.latency_steps * (crosses_nodes ? protocol->step_latency_inter : protocol->step_latency_intra);
    if (schedule.pipelined) {
      // Scaled here, since the pipeline's phases may move at different shares of their links.
      for (Flow flow : phase.flows) {
        flow.bytes *= phase_scale;
        pipeline.push_back(flow);
      }
      pipeline_wait += wait;
      continue;
    }
    run_flows(hosts, phase.flows, phase_scale);
    if (wait > 0) sg4::this_actor::sleep_for(wait);
  }
  if (!schedule.pipelined) return;
  run_flows(hosts, pipeline, 1.0);
  // A chunk pipeline's fill (ScheduleCost::fill), at the idle links' rates.
  if (steps && protocol && schedule.chunk_limit > 0)
    pipeline_wait += fill_chunk(*protocol, schedule.chunk_limit, schedule.chunk_fraction) * scale *
                     chunk_fill(schedule, member_nodes, costs_);
  if (pipeline_wait > 0) sg4::this_actor::sleep_for(pipeline_wait);
}

// A measured collective (MeasuredCurve, cost_model.hpp) takes its measured time at its size, moved
// as its schedule's flows stretched to last that long, so collectives in flight together still
// share the links. The curve holds the host contention of the process count it was measured on; a
// program with more processes than that on the host's cores stretches what it adds beyond its
// smallest size's time by the rest (a group of 2 measured alone, run beside another group of 2 on a
// 2-core host, moves its bytes half as fast), as the fitted line stretches its volume term.
void Simulation::run_measured(const ProgramOp& op, const MeasuredCurve& curve, const Schedule& schedule,
                              const std::vector<sg4::Host*>& hosts, const std::vector<int>& member_nodes,
                              double slowdown) {
  double seconds = curve.seconds_at(static_cast<double>(op.bytes));
  if (platform_.kind == PlatformKind::cpu_host && platform_.cores > 0) {
    // Only what grows with the size shares the cores (the line's volume term); the latency of the
    // smallest size stays.
    const double stretch = host_contention_ / std::max(1.0, static_cast<double>(curve.ranks) / platform_.cores);
    seconds = curve.seconds.front() + (seconds - curve.seconds.front()) * stretch;
  }
  seconds *= slowdown;
  // The curve's time holds every latency step: the flows alone, which pay their routes' latency
  // (each phase's once, a pipeline's once), stretched to take the rest.
  auto [it, inserted] = flows_cost_cache_.try_emplace(&schedule);
  if (inserted) {
    Schedule flows_only = schedule;
    for (SchedulePhase& phase : flows_only.phases) {
      phase.latency_steps = 1;
      phase.nvls = false;  // stretched like every other flow, at the link's own rate
    }
    it->second = estimate_parts(flows_only, member_nodes, costs_);
  }
  const ScheduleCost& ideal = it->second;
  if (!(ideal.bandwidth > 0) || !(seconds > ideal.latency)) {
    sg4::this_actor::sleep_for(seconds);
    return;
  }
  const double stretch = (seconds - ideal.latency) / ideal.bandwidth;
  run_schedule(schedule, hosts, member_nodes, nullptr, stretch, stretch, false);
}

// A group of one moves nothing over the network, but an out-of-place collective still fills its
// own output: NCCL (ncclLaunchOneRank) copies the send buffer into a distinct receive buffer with
// one device-to-device cudaMemcpyAsync (nothing when the two alias), and Gloo copies the local
// input into the output. The program's all-gathers, reduce-scatters, all-to-alls and scatters are
// out of place as stratsim's executor and DTensor's functional collectives issue them
// (core::runs_in_place), so they pay a read and a write of the buffer at the rate streaming kernels
// reach; all-reduce and broadcast run in place (DDP's buckets, NO_SHARD gradients) and cost only
// the launch. (PyTorch's FSDP2 gathers in place, and copies where it would reduce-scatter, at world
// size 1; FSDP1 switches to NO_SHARD there. Neither is planned yet: issue 11.) Measured with
// `stratsim run` on one H100 and one H200: 0.44-4.2 GB gathers and scatters took 0.22-5.3 ms beside
// compute, 1.3-1.5x the price of the copy alone at the median; priced at their 5 us launch before.
double Simulation::one_rank_copy_seconds(const ProgramOp& op) const {
  if (core::runs_in_place(op.kind)) return 0;
  const double bytes = static_cast<double>(op.output_bytes > 0 ? op.output_bytes : op.bytes);
  const double rate = device_.memory_bandwidth * platform_.cost.compute.efficiency("elementwise").memory;
  if (bytes <= 0 || rate <= 0) return 0;
  return std::max(2 * bytes / rate, platform_.cost.compute.kernel_floor());
}

// One CollectiveRun per full instance the simulated instance stands for (by symmetry they all
// ran at the same times).
void Simulation::record(const ProgramOp& op, int instance, Algorithm algorithm, const Protocol* protocol, double start,
                        double end) {
  const SimulatedGroup& group = folding_.groups[op.group];
  for (int full : group.stands_for[instance]) {
    CollectiveRun run;
    run.op = op.id;
    run.instance = full;
    run.algorithm = std::string(algorithm_name(algorithm));
    if (protocol) run.algorithm += "/" + protocol->name;  // as NCCL_DEBUG=INFO says it: ring/LL128
    run.bytes = static_cast<double>(op.bytes);
    run.group_size = group.full_size;
    run.start = start;
    run.end = end;
    run.ranks = full_instances(op.group)[full];
    runs_.push_back(std::move(run));
  }
}

// Starts flows together and waits for all of them. SimGrid 3.32 keeps an actor's pending comms
// in a list and removes each finished comm by a full scan (CommImpl::finish), so one actor
// waiting on p comms costs O(p^2): a 16,384-member ring phase took seconds. Slices of at most
// kFlowsPerActor flows, each started and awaited by its own actor, keep that scan short; the
// flows still start at the same simulated instant, so the timings are unchanged.
void Simulation::run_flows(const std::vector<sg4::Host*>& hosts, std::span<const Flow> flows, double scale) {
  constexpr std::size_t kFlowsPerActor = 64;
  if (flows.size() > kFlowsPerActor) {
    std::vector<sg4::ActorPtr> workers;
    for (std::size_t first = 0; first < flows.size(); first += kFlowsPerActor) {
      const auto slice = flows.subspan(first, std::min(kFlowsPerActor, flows.size() - first));
      workers.push_back(sg4::Actor::create("flows", sg4::this_actor::get_host(),
                                           [this, &hosts, slice, scale] { run_flows(hosts, slice, scale); }));
    }
    for (const sg4::ActorPtr& worker : workers) worker->join();
    return;
  }
  std::vector<sg4::CommPtr> comms;
  comms.reserve(flows.size());
  for (const Flow& flow : flows) {
    // Schedules split buffers evenly, so a tiny buffer over many ranks gives sub-byte flows;
    // SimGrid 3.32 serialises zero-byte comms, so every flow carries at least one byte.
    const auto bytes = static_cast<std::uint64_t>(std::max<long long>(1, std::llround(flow.bytes * scale)));
    const Route& path = route(hosts[flow.src], hosts[flow.dst]);
    // SimGrid's network model asserts a path (a link or some latency) between distinct hosts.
    if (path.links.empty() && !(path.latency > 0) && hosts[flow.src] != hosts[flow.dst]) {
      if (missing_route_.empty())
        missing_route_ = fmt::format("{} to {}", hosts[flow.src]->get_cname(), hosts[flow.dst]->get_cname());
      continue;
    }
    for (const sg4::Link* link : path.links) link_bytes_[link] += static_cast<double>(bytes);
    comms.push_back(sg4::Comm::sendto_async(hosts[flow.src], hosts[flow.dst], bytes));
  }
  flows_ += static_cast<std::int64_t>(comms.size());
  sg4::Comm::wait_all(comms);
}

void Simulation::finish_op(SimRank& rank, const ProgramOp& op, const OpTiming& timing) {
  rank.timings[op.id] = timing;
  {
    std::unique_lock<sg4::Mutex> lock(*lock_);
    rank.done[op.id] = 1;
    rank.op_finished->notify_all();
  }
  progress_.advance();
}

SimResult Simulation::collect(RankMode mode) {
  SimResult result;
  result.rank_mode = mode;
  result.mode = rank_mode_name(mode);
  result.platform = describe_platform(platform_);
  result.world_size = program_.world_size;
  for (SimRank& rank : sim_ranks_) {
    for (std::size_t i = 0; i < rank.done.size(); ++i)
      if (!rank.done[i])
        throw core::InputError(fmt::format("the program deadlocked: op {} \"{}\" of rank {} never ran", i,
                                           program_.ops[i].name, rank.ranks.front()));
    result.recorded.push_back(rank.ranks);
    result.timings.push_back(std::move(rank.timings));
  }
  result.iteration_end.assign(std::max(program_.iterations, 1), 0.0);
  for (const auto& timings : result.timings)
    for (const ProgramOp& op : program_.ops) {
      if (op.iteration < 1 || op.iteration > static_cast<int>(result.iteration_end.size())) continue;
      double& end = result.iteration_end[op.iteration - 1];
      end = std::max(end, timings[op.id].end);
    }
  for (std::size_t i = 1; i < result.iteration_end.size(); ++i)
    result.iteration_end[i] = std::max(result.iteration_end[i], result.iteration_end[i - 1]);
  // The clock is not reliable once the engine has stopped (3.32): take the last op's end.
  result.makespan = 0;
  for (const auto& timings : result.timings)
    for (const OpTiming& timing : timings) result.makespan = std::max(result.makespan, timing.end);
  for (const CollectiveRun& run : runs_) result.makespan = std::max(result.makespan, run.end);
  std::sort(runs_.begin(), runs_.end(), [](const CollectiveRun& a, const CollectiveRun& b) {
    return std::tie(a.start, a.op, a.instance) < std::tie(b.start, b.op, b.instance);
  });
  result.collectives = std::move(runs_);
  for (sg4::Link* link : built_.links) {
    const auto carried = link_bytes_.find(link);
    if (carried == link_bytes_.end() || carried->second <= 0) continue;
    const double bytes = carried->second;
    LinkLoad load;
    load.name = link->get_name();
    load.bandwidth = link->get_bandwidth();
    load.bytes = bytes;
    load.utilisation = result.makespan > 0 ? bytes / (load.bandwidth * result.makespan) : 0;
    result.links.push_back(std::move(load));
  }
  std::sort(result.links.begin(), result.links.end(),
            [](const LinkLoad& a, const LinkLoad& b) { return a.name < b.name; });
  result.flows = flows_;
  result.folded_nodes = folding_.nodes;
  result.total_nodes = folding_.total_nodes;
  result.fold_note = folding_.note;
  annotate(result);
  return result;
}

}  // namespace

void require_devices(const PlatformSpec& platform, int devices, int world_size) {
  if (devices < world_size)
    throw core::InputError(
        fmt::format("platform \"{}\" has {} devices but the plan needs {} ranks (one rank per device)", platform.name,
                    devices, world_size));
}

RankMode effective_mode(const SimOptions& options) {
  if (options.mode != RankMode::automatic) return options.mode;
  return options.stragglers.empty() ? RankMode::representative : RankMode::full;
}

SimResult run_engine(const Program& program, const PlatformSpec& platform, const SimOptions& options,
                     const EngineHooks& hooks) {
  int argc = 1;
  char name[] = "stratsim-simulate";
  char* argv[] = {name, nullptr};
  sg4::Engine engine(&argc, argv);
  configure_simgrid(engine);
  if (hooks.log_fd >= 0) {
    // Unbuffered: an xbt_assert logs, then aborts without flushing stdio.
    if (FILE* log = ::fdopen(::dup(hooks.log_fd), "w")) {
      std::setvbuf(log, nullptr, _IONBF, 0);
      xbt_log_appender_set(&_XBT_LOGV(XBT_LOG_ROOT_CAT), xbt_log_appender_stream(log));
      xbt_log_control_set("root.fmt:%m%n");
    }
  }
  // Actors need little stack; small stacks without guard pages let full mode run tens of
  // thousands of them (simulators.md 4.7: vm.max_map_count otherwise).
  engine.set_config("contexts/stack-size:256");
  engine.set_config("contexts/guard-size:0");
  BuiltPlatform built = build_platform(platform);
  if (hooks.platform_built) hooks.platform_built();
  require_devices(platform, static_cast<int>(built.devices.size()), program.world_size);
  Simulation simulation(program, platform, options, std::move(built));
  return simulation.run(effective_mode(options));
}

}  // namespace stratsim::sim::detail
