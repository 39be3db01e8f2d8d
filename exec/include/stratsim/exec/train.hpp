// Training for real (`stratsim run --train`): every rank runs the plan's program on real fp32
// values. Compute ops are the leaf modules' forward and backward, collectives move the tensors
// the program says they carry (DDP buckets, FSDP flat parameters and gradients, DTensor
// activations), the optimizer steps what the rank holds (replicas, tensor-parallel shards, FSDP
// flat shards). The result is checked against single-process training on the global batch, as
// PyTorch's own tests check replicate and fully_shard: a wrong bucket, a missing all-gather or a
// mis-scaled reduction shows up as a parameter that no longer matches.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "stratsim/core/model.hpp"
#include "stratsim/core/plan.hpp"
#include "stratsim/core/planner.hpp"
#include "stratsim/exec/backend.hpp"
#include "stratsim/exec/executor.hpp"

namespace stratsim::exec {

struct TrainOptions {
  std::uint64_t seed = 0;  // parameters and data; the same on every rank and in the reference
  // An element matches when |distributed - local| <= atol + rtol * |local| (torch.testing's
  // float32 defaults are atol 1e-5, rtol 1.3e-6).
  double atol = 1e-5;
  double rtol = 1.3e-6;
};

// Why this model and plan cannot be trained for real (unsupported layers, mixed precision, a
// tensor-parallel layout without numerics here), or "" when they can. Exit code 2 material.
std::string train_unsupported_reason(const core::Model& model, const core::Plan& plan, const core::PlanResult& planned);

// One parameter as one rank holds it at the end of training.
struct HeldParam {
  std::string fqn;
  std::string slice;         // which part of the full tensor: "full", "tp 1/2 of dim 0"
  bool synchronised = true;  // false for replicate's ignored_modules: trained on local data only
  double max_abs_diff = 0;   // against the same slice of the local reference
  double max_abs_reference = 0;
  std::int64_t mismatches = 0;  // elements outside the tolerance
  std::uint64_t digest = 0;     // of the bits: ranks holding the same slice must agree exactly
};

// What one rank reports after training.
struct TrainRecord {
  int rank = 0;
  std::vector<HeldParam> params;      // model.params order
  std::vector<double> squared_error;  // per micro-step: this rank's share of the global batch's sum of squared errors
  int state_dict_all_gathers = 0;     // FSDP full-state-dict gathers after the last step (not in the program)
  RankRecord timing;                  // per program op, as the executor records it
  // The local reference, as this rank computed it (every rank does; rank 0's is reported).
  std::int64_t global_rows = 0;  // rows of the global batch per micro-step
  std::int64_t output_features = 0;
  std::vector<int> optimizer_after;    // micro-steps followed by an optimizer step
  std::vector<double> reference_loss;  // per micro-step, F.mse_loss(mean) on the global batch
};

// Trains this rank (backend.rank()) through `planned.program`. Throws CommError (a peer died or
// hung), core::InputError (unsupported input) or std::runtime_error when the program and the
// values disagree (a DTensor layout the program did not redistribute, ranks with different
// models): the message names the op.
TrainRecord run_training(const core::Model& model, const core::Plan& plan, const core::PlanResult& planned,
                         Backend& backend, const TrainOptions& options);

std::string encode(const TrainRecord& record);
TrainRecord decode_train_record(const std::string& text);

// Rank 0's view of a training run: the local reference next to every rank's record.
struct TrainingSummary {
  std::string model, plan;
  int world_size = 1, iterations = 0;
  std::int64_t global_rows = 0;                          // rows of the global batch per micro-step
  std::vector<int> optimizer_steps_after;                // micro-steps followed by an optimizer step
  std::vector<double> reference_loss, distributed_loss;  // per micro-step, F.mse_loss(mean)
  struct Param {
    std::string fqn;
    std::vector<std::string> slices;  // distinct slices the ranks hold
    bool synchronised = true;
    double max_abs_diff = 0, max_abs_reference = 0;
    std::int64_t mismatches = 0;
    bool replicas_identical = true;  // every slice's holders agree bit for bit
  };
  std::vector<Param> params;
  std::map<std::string, int> collectives;  // comm key -> count over the run (the program's, executed)
  int state_dict_all_gathers = 0;
  double atol = 0, rtol = 0;
  bool passed = false;
  // What `passed` judged: "parameters" (every element within atol + rtol |local|), "losses"
  // (Adam: losses within 1e-6 relative, parameters within 100 x atol, replicas identical) or
  // "replicas" (parameters not averaged over every data-parallel dim: synchronised replicas
  // identical, the others different).
  std::string criterion = "parameters";
  std::vector<std::string> notes;
};

TrainingSummary summarize(const core::Model& model, const core::Plan& plan, const core::PlanResult& planned,
                          const std::vector<TrainRecord>& records, const TrainOptions& options);
std::string training_text(const TrainingSummary& summary);
nlohmann::json training_json(const TrainingSummary& summary);

}  // namespace stratsim::exec
