// The network half of the accuracy suite: simulates nccl-tests on one 8-GPU node of each preset
// and compares busbw with published runs (nccl-tests.yaml, every row cited). Prints a Markdown
// table; exits 1 when a row at or above min_bytes is off by more than the tolerance, unless the
// data lists it as a known miss (and then also when a listed miss comes inside: the list stays true).
//
//   accuracy_nccl_tests [FILE] [--markdown]
//
// busbw follows nccl-tests (ecosystem.md 2.5): algbw = n / t, times 2(p-1)/p for all-reduce and
// (p-1)/p for all-gather and reduce-scatter, with t the collective's simulated time from launch
// to completion (nccl-tests times the same span, averaged over iterations).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "stratsim/core/errors.hpp"
#include "stratsim/core/json_reader.hpp"
#include "stratsim/sim/simulator.hpp"

namespace {

using namespace stratsim;

struct Row {
  double bytes = 0, published = 0;
};

struct Dataset {
  std::string name, source, platform, use, why;
  std::optional<sim::Algorithm> algorithm;  // NCCL_ALGO forced in the run; none: NCCL's tuner
  std::vector<double> known_outside;  // sizes the model is known to miss
  core::CollectiveKind kind = core::CollectiveKind::all_reduce;
  std::vector<Row> rows;
};

// One collective over every GPU of the platform, as all_reduce_perf -g 8 (or 8 ranks) runs it on one
// node, or mpirun -np 16 -npernode 8 on two.
core::Program one_collective(core::CollectiveKind kind, double bytes, int gpus) {
  core::Program program;
  program.mesh = core::DeviceMesh({gpus}, {"world"});
  program.world_size = gpus;
  program.iterations = 1;
  program.streams = {"compute", "comm"};
  core::ProgramOp op;
  op.type = core::OpType::collective;
  op.kind = kind;
  op.name = std::string(core::collective_kind_name(kind));
  op.group = program.group_id({0});
  op.stream = program.stream_id("comm");
  op.bytes = op.input_bytes = op.output_bytes = static_cast<std::int64_t>(bytes);
  op.dtype = core::DType::float32;
  program.add(op);
  return program;
}

double busbw_factor(core::CollectiveKind kind, int p) {
  return kind == core::CollectiveKind::all_reduce ? 2.0 * (p - 1) / p : static_cast<double>(p - 1) / p;
}

std::vector<Dataset> read_datasets(const core::JsonReader& root) {
  std::vector<Dataset> datasets;
  const core::JsonReader list = root.at("datasets");
  for (std::size_t i = 0; i < list.size(); ++i) {
    const core::JsonReader d = list.at(i);
    d.allow_only({"name", "source", "platform", "collective", "algorithm", "use", "rows", "known_outside", "why"});
    Dataset dataset;
    dataset.name = d.at("name").as_string();
    dataset.source = d.at("source").as_string();
    dataset.platform = d.at("platform").as_string();
    dataset.use = d.at("use").as_string();
    if (dataset.use != "fit" && dataset.use != "check") d.at("use").fail("expected fit or check");
    const std::string kind = d.at("collective").as_string();
    if (kind == "all_reduce") dataset.kind = core::CollectiveKind::all_reduce;
    else if (kind == "all_gather") dataset.kind = core::CollectiveKind::all_gather;
    else if (kind == "reduce_scatter") dataset.kind = core::CollectiveKind::reduce_scatter;
    else d.at("collective").fail("expected all_reduce, all_gather or reduce_scatter");
    if (d.has("algorithm")) {
      dataset.algorithm = sim::parse_algorithm(d.at("algorithm").as_string());
      if (!dataset.algorithm || *dataset.algorithm == sim::Algorithm::automatic)
        d.at("algorithm").fail("expected the algorithm NCCL_ALGO forced (ring, tree, nvls, nvls_tree)");
    }
    if (d.has("known_outside")) {
      const core::JsonReader sizes = d.at("known_outside");
      for (std::size_t k = 0; k < sizes.size(); ++k) dataset.known_outside.push_back(sizes.at(k).as_number());
      dataset.why = d.at("why").as_string();
    }
    const core::JsonReader rows = d.at("rows");
    for (std::size_t r = 0; r < rows.size(); ++r)
      dataset.rows.push_back({rows.at(r).at(0).as_number(), rows.at(r).at(1).as_number()});
    datasets.push_back(std::move(dataset));
  }
  return datasets;
}

std::string size_label(double bytes) {
  return bytes >= 1073741824 ? fmt::format("{:g} GiB", bytes / 1073741824) : fmt::format("{:g} MiB", bytes / 1048576);
}

int run(const std::string& path) {
  const nlohmann::json document = core::load_document(path);
  const core::JsonReader root(document, path);
  const double tolerance = root.at("tolerance").as_number();
  const double min_bytes = root.at("min_bytes").as_number();
  int outside = 0, checked = 0, unexpected = 0;
  double worst = 0;
  std::printf("| data | use | size | algorithm | published busbw | simulated busbw | error |\n");
  std::printf("|---|---|---:|---|---:|---:|---:|\n");
  for (const Dataset& dataset : read_datasets(root)) {
    const sim::PlatformSpec platform = sim::parse_platform(dataset.platform);
    const int gpus = platform.device_count();  // every GPU of the platform: one node, or all of them
    sim::SimOptions options;
    if (dataset.algorithm) options.algorithms[dataset.kind] = *dataset.algorithm;
    for (const Row& row : dataset.rows) {
      const sim::SimResult result = sim::simulate(one_collective(dataset.kind, row.bytes, gpus), platform, options);
      const core::CollectiveRun& run = result.collectives.front();
      const double busbw = row.bytes / (run.end - run.start) * busbw_factor(dataset.kind, gpus) / 1e9;
      const double error = busbw / row.published - 1;
      const bool counted = row.bytes >= min_bytes;
      const bool miss = counted && std::abs(error) > tolerance;
      const bool known = std::find(dataset.known_outside.begin(), dataset.known_outside.end(), row.bytes) !=
                         dataset.known_outside.end();
      if (counted) ++checked, worst = std::max(worst, std::abs(error));
      if (miss) ++outside;
      if (miss != known) ++unexpected;
      std::printf(
          "| %s | %s | %s | %s | %.1f | %.1f | %+.1f %%%s |\n", dataset.name.c_str(), dataset.use.c_str(),
          size_label(row.bytes).c_str(), run.algorithm.c_str(), row.published, busbw, 100 * error,
          miss ? (known ? " outside (known)" : " **outside**") : (known ? " **inside, listed as outside**" : ""));
    }
  }
  std::printf("\n%d of %d rows within %.0f %% (worst %.1f %%); %d known misses listed in the data\n", checked - outside,
              checked, 100 * tolerance, 100 * worst, outside - unexpected);
  for (const Dataset& dataset : read_datasets(root))
    if (!dataset.why.empty()) std::printf("- %s: %s\n", dataset.name.c_str(), dataset.why.c_str());
  return unexpected == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : STRATSIM_ACCURACY_DATA "/nccl-tests.yaml";
  try {
    return run(path);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "accuracy_nccl_tests: error: %s\n", error.what());
    return 2;
  }
}
