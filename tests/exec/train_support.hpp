// Training with ranks as threads over Gloo (file rendezvous in a private directory), shared by
// the --train scenario and property tests.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "stratsim/core/errors.hpp"
#include "stratsim/core/model_io.hpp"
#include "stratsim/core/plan.hpp"
#include "stratsim/core/planner.hpp"
#include "stratsim/exec/backend.hpp"
#include "stratsim/exec/communicator.hpp"
#include "stratsim/exec/train.hpp"

namespace stratsim::test {

enum class ErrorKind { none, comm, input, runtime, other };

struct RankError {
  ErrorKind kind = ErrorKind::none;
  std::string message;
};

struct Outcome {
  exec::TrainingSummary summary;  // filled when every rank finished
  std::vector<RankError> errors;  // per rank
  bool all_done() const {
    return std::all_of(errors.begin(), errors.end(), [](const RankError& e) { return e.kind == ErrorKind::none; });
  }
};

// Plans load from files or builtin names: writes `plan_json` to a temporary file, loads it and
// removes it.
inline core::Plan load_plan_text(const std::string& plan_json) {
  static int counter = 0;
  const auto path = std::filesystem::temp_directory_path() /
                    ("stratsim-train-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".json");
  std::ofstream(path) << plan_json;
  try {
    core::Plan plan = core::load_plan(path.string());
    std::filesystem::remove(path);
    return plan;
  } catch (...) {
    std::filesystem::remove(path);
    throw;
  }
}

// Every rank trains through its own planned program; rank 0's view summarises the run.
inline Outcome train_threads(const core::Model& model, const core::Plan& plan,
                             const std::vector<core::PlanResult>& planned, const exec::TrainOptions& options) {
  const int world = plan.world_size;
  std::string dir = (std::filesystem::temp_directory_path() / "stratsim-train-XXXXXX").string();
  if (::mkdtemp(dir.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  std::vector<exec::TrainRecord> records(world);
  Outcome outcome;
  outcome.errors.resize(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank)
    threads.emplace_back([&, rank] {
      RankError& error = outcome.errors[rank];
      try {
        exec::BackendOptions backend_options;
        backend_options.timeout = std::chrono::seconds(10);
        auto backend =
            exec::make_gloo_backend(exec::parse_rendezvous("file:" + dir, "t"), rank, world, backend_options);
        // Through the store's encoding, as the CLI ships records to rank 0.
        records[rank] =
            exec::decode_train_record(exec::encode(exec::run_training(model, plan, planned[rank], *backend, options)));
      } catch (const exec::CommError& e) {
        error = {ErrorKind::comm, e.what()};
      } catch (const core::InputError& e) {
        error = {ErrorKind::input, e.what()};
      } catch (const std::runtime_error& e) {
        error = {ErrorKind::runtime, e.what()};
      } catch (const std::exception& e) {
        error = {ErrorKind::other, e.what()};
      }
    });
  for (std::thread& thread : threads) thread.join();
  std::filesystem::remove_all(dir);
  if (outcome.all_done()) outcome.summary = exec::summarize(model, plan, planned[0], records, options);
  return outcome;
}

using Mutation = std::function<void(core::PlanResult&)>;

// From a model spec (file or zoo:NAME) and a plan (JSON text or builtin:NAME), every rank's
// program optionally mutated.
inline Outcome train_spec(const std::string& model_spec, const std::string& plan_spec, const Mutation& mutate = {},
                          const exec::TrainOptions& options = {}) {
  const core::Model model = core::load_model(model_spec);
  const core::Plan plan = plan_spec.starts_with("builtin:") ? core::load_plan(plan_spec) : load_plan_text(plan_spec);
  std::vector<core::PlanResult> planned(plan.world_size);
  for (int rank = 0; rank < plan.world_size; ++rank) {
    core::PlanOptions plan_options;
    plan_options.rank = rank;
    planned[rank] = core::plan_training(model, plan, plan_options);
    if (mutate) mutate(planned[rank]);
  }
  return train_threads(model, plan, planned, options);
}

}  // namespace stratsim::test
