// What one run of a program produced, simulated or measured: when every op ran on every recorded
// rank, every collective group instance, link loads. The simulator (sim/) and real execution
// (exec/) both fill it, so one analysis, one set of reports and one timeline writer
// (run_analysis.hpp, trace.hpp) serve both, and `stratsim compare` can put them side by side.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace stratsim::core {

class JsonReader;  // json_reader.hpp
struct Program;    // program.hpp

// When one op ran on one recorded rank, in seconds from the run's origin. For collectives:
// issue = the rank reached it on its stream; start = the last member issued it (simulated) or
// the rank entered the library call (measured); end = it completed for this rank.
struct OpTiming {
  double issue = 0, start = 0, end = 0;
};

// One group instance of one collective op.
struct CollectiveRun {
  int op = 0;             // ProgramOp id
  int instance = 0;       // which group of the op's mesh dims (DeviceMesh::group_index)
  std::string algorithm;  // "ring", "tree", "hierarchical", ... (simulated); "gloo ring", "nccl" (measured)
  double bytes = 0;       // nccl-tests n
  int group_size = 1;
  double start = 0, end = 0;
  std::vector<int> ranks;  // members, in group order
};

struct LinkLoad {
  std::string name;
  double bandwidth = 0;    // bytes/s
  double bytes = 0;        // carried over the whole run
  double utilisation = 0;  // bytes / (bandwidth * makespan)
};

struct RunResult {
  std::string source = "simulation";    // "simulation" | "gloo" | "nccl"
  std::string mode = "representative";  // "representative" | "full" (simulated) | "measured"
  std::string platform;                 // one line: the modelled platform or the measured host
  int world_size = 1;
  std::vector<std::vector<int>> recorded;      // recorded rank -> the ranks it stands for
  std::vector<std::vector<OpTiming>> timings;  // [recorded rank][op id]
  std::vector<CollectiveRun> collectives;      // by start time, then op, then instance
  std::vector<LinkLoad> links;                 // every link that carried bytes, by name (simulated)
  std::vector<double> iteration_end;           // [iteration - 1]: when the last op of it ended on any rank
  double makespan = 0;
  double wall_seconds = 0;  // host time the run took (not part of the deterministic output)
  // What the producer wants said beside the figures (run_analysis.hpp's reports know nothing of
  // any one producer): clauses of the text report's mode line ("network folded onto 8 of 16 nodes
  // by node symmetry"), clauses in its makespan line's parentheses, before the host time
  // ("1920 SimGrid flows"), and keys merged into the JSON report's top level ({"folded_nodes": 8};
  // the report's own keys win).
  std::vector<std::string> mode_notes;
  std::vector<std::string> notes;
  nlohmann::json extra = nlohmann::json::object();
};

// The whole RunResult as JSON (the "run" of a timeline v2) and back. Times are seconds as doubles,
// so a result read back analyses to the same figures. Timings are three arrays per recorded rank
// indexed by op id (issue_s, start_s, end_s); collectives are columns (op, instance, algorithm,
// bytes, group_size, start_s, end_s, ranks), compact and fast to read at hundreds of thousands of
// instances. Given the program the result ran, an instance whose ranks are its mesh group's is
// written with ranks null and read back from the program's mesh. wall_seconds is host time, not
// part of the deterministic output: it is not written.
nlohmann::json run_result_to_json(const RunResult& result, const Program* program = nullptr);
// Throws InputError naming `origin` and the field path.
RunResult run_result_from_json(const nlohmann::json& document, const std::string& origin,
                               const Program* program = nullptr);
RunResult run_result_from_json(const JsonReader& document, const Program* program = nullptr);

}  // namespace stratsim::core
