// Property test of real training over random small models and plans (tests/random_cases.hpp):
// for every seed, the first case of that seed (no mixed precision, at most 4 ranks) trains with
// ranks as threads over Gloo and must match single-process training on the global batch, as
// tests/exec/train_test.cpp checks the hand-written scenarios.
//
// Per case:
//  * planning rejects it as PyTorch does (replicate() of a module whose parameters all went to
//    fully_shard), or train_unsupported_reason names why it cannot train: skipped;
//  * a rank stops on an activation layout PyTorch itself would reject (the random tensor-parallel
//    plan chains a ColwiseParallel layer into a plain Linear, feeds RowwiseParallel a replicated
//    activation it cannot take, ...): layout rejected;
//  * otherwise every rank must finish, every parameter match the local reference, replicas agree
//    bit for bit and the distributed loss equal the local one (compress hooks within their 16-bit
//    tolerance). When some wrapper averages gradients over fewer mesh dims than the batch is
//    split over (replicate over "shard" beside fully_shard over "rep"), the model diverges by
//    design: then synchronised parameters must agree on every replica and the others must not.
//    Anything else fails, printing the model and plan so the case can be reproduced.
//
// STRATSIM_TRAIN_SEEDS="A-B" or "A,B,C" replaces the fixed seeds (to reproduce or explore).
#include <gtest/gtest.h>

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "../random_cases.hpp"
#include "stratsim/core/errors.hpp"
#include "stratsim/core/plan.hpp"
#include "stratsim/core/planner.hpp"
#include "stratsim/exec/backend.hpp"
#include "stratsim/exec/communicator.hpp"
#include "stratsim/exec/train.hpp"
#include "train_support.hpp"

namespace stratsim::test {
namespace {

// ---- classification -----------------------------------------------------------------------------

// The trainer's forward-layout refusals (exec/src/train.cpp, train_dtensor.cpp): an activation
// reaching a DTensor boundary in a layout other than the one it declares, or a plain module fed a
// feature-sharded activation. The random tensor-parallel plan built something PyTorch itself
// would reject. (A redistribution the program gets wrong reads differently, "the program
// redistributes from ...", and fails.)
bool layout_message(const std::string& message) {
  for (const char* needle : {"declares its input", "cannot run on a"})
    if (message.find(needle) != std::string::npos) return true;
  return false;
}

// Every rank stopped, at least one on an impossible layout, the others on the same kind of
// message or because that peer went away.
bool layout_rejected(const Outcome& outcome) {
  bool any = false;
  for (const RankError& e : outcome.errors) {
    const bool layout = e.kind == ErrorKind::runtime && layout_message(e.message);
    if (!layout && e.kind != ErrorKind::comm) return false;
    any = any || layout;
  }
  return any;
}

// The hooks' 16-bit gradients: the tolerance train_test.cpp gives them (0 when there are none).
double compress_rtol(const core::Plan& plan) {
  double rtol = 0;
  for (const core::PlanStep& step : plan.steps)
    if (const auto* rep = std::get_if<core::ReplicateStep>(&step.body)) {
      if (rep->comm_hook == core::CommHook::fp16_compress) rtol = std::max(rtol, 1e-3);
      if (rep->comm_hook == core::CommHook::bf16_compress) rtol = std::max(rtol, 1.6e-2);
    }
  return rtol;
}

// What breaks parity (empty when the summary passes), as expect_parity in train_test.cpp checks it.
bool diverging(const exec::TrainingSummary& s) {
  return std::any_of(s.params.begin(), s.params.end(), [](const auto& p) { return !p.synchronised; });
}

std::vector<std::string> parity_problems(const exec::TrainingSummary& s, const exec::TrainOptions& options,
                                         double loss_rtol, bool compressed) {
  std::vector<std::string> problems;
  if (!s.passed) problems.push_back("the summary did not pass");
  if (diverging(s)) {
    // Some wrapper averages over fewer dims than the batch is split over (or none): the model
    // diverges by design. Synchronised parameters must still agree on every replica, and the
    // others must not.
    for (const auto& p : s.params)
      if (p.replicas_identical != p.synchronised)
        problems.push_back(p.fqn + (p.synchronised ? ": synchronised, but replicas differ"
                                                   : ": not synchronised, yet "
                                                     "replicas agree"));
    return problems;
  }
  for (const auto& p : s.params) {
    std::ostringstream out;
    // Without a hook, torch.testing's absolute float32 tolerance; with one, the hook's.
    const double bound = compressed ? options.atol + options.rtol * p.max_abs_reference : 1e-5;
    if (p.mismatches != 0) out << " " << p.mismatches << " elements outside the tolerance;";
    if (!p.replicas_identical) out << " replicas differ;";
    if (!(p.max_abs_diff < bound)) out << " max |diff| " << p.max_abs_diff << " (bound " << bound << ");";
    if (!(p.max_abs_reference > 0)) out << " reference is " << p.max_abs_reference << ";";
    if (!p.synchronised) out << " not synchronised;";
    if (!out.str().empty()) problems.push_back(p.fqn + ":" + out.str());
  }
  if (s.reference_loss.size() != s.distributed_loss.size()) {
    problems.push_back("reference and distributed losses have different lengths");
  } else {
    for (std::size_t i = 0; i < s.reference_loss.size(); ++i) {
      const double ref = s.reference_loss[i], dist = s.distributed_loss[i];
      if (!(std::abs(dist - ref) <= loss_rtol * std::abs(ref)))
        problems.push_back("loss of step " + std::to_string(i + 1) + ": distributed " + std::to_string(dist) +
                           ", local " + std::to_string(ref));
    }
  }
  return problems;
}

// ---- seeds ----------------------------------------------------------------------------------------

std::vector<std::uint32_t> seeds() {
  std::vector<std::uint32_t> out;
  const char* env = std::getenv("STRATSIM_TRAIN_SEEDS");
  const std::string spec = env != nullptr && *env != '\0' ? env : "1-40";
  std::stringstream list(spec);
  std::string item;
  while (std::getline(list, item, ',')) {
    const std::size_t dash = item.find('-');
    const auto first = static_cast<std::uint32_t>(std::stoul(item.substr(0, dash)));
    const auto last = dash == std::string::npos ? first : static_cast<std::uint32_t>(std::stoul(item.substr(dash + 1)));
    for (std::uint32_t seed = first; seed <= last; ++seed) out.push_back(seed);
  }
  return out;
}

TEST(TrainProperties, RandomModelsAndPlansMatchLocalTraining) {
  CaseOptions case_options;
  case_options.mixed_precision = false;  // no numerics for bf16 parameters in --train
  case_options.max_world_size = 4;       // ranks are threads on a small box
  const std::vector<std::uint32_t> seed_list = seeds();
  int trained = 0, diverged = 0, skipped = 0, rejected = 0, failed = 0;
  const auto start = std::chrono::steady_clock::now();

  for (const std::uint32_t seed : seed_list) {
    Random random(seed);
    const Case c = random_case(random, case_options);
    const std::string repro = "seed " + std::to_string(seed) + "\nmodel: " + c.model_text + "\nplan: " + c.plan_text;
    const auto case_start = std::chrono::steady_clock::now();
    const auto elapsed = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - case_start).count();
    };

    const core::Model model = random_case_model(nlohmann::json::parse(c.model_text));
    const core::Plan plan = load_plan_text(c.plan_text);
    std::vector<core::PlanResult> planned(static_cast<std::size_t>(plan.world_size));
    try {
      for (int rank = 0; rank < plan.world_size; ++rank) {
        core::PlanOptions plan_options;
        plan_options.rank = rank;
        planned[static_cast<std::size_t>(rank)] = core::plan_training(model, plan, plan_options);
      }
    } catch (const core::PlanError& e) {
      // PyTorch rejects replicate() of a module whose parameters all went to fully_shard (as the
      // planner property test expects); any other planning error is a failure.
      const bool expected = std::string(e.what()).find("DistributedDataParallel is not needed") != std::string::npos;
      if (!expected) {
        ++failed;
        ADD_FAILURE() << "the planner rejected a valid plan: " << e.what() << "\n" << repro;
      } else {
        ++skipped;
        std::cout << "seed " << seed << ": skipped (planner: " << e.what() << ")\n";
      }
      continue;
    }
    const std::string why = exec::train_unsupported_reason(model, plan, planned[0]);
    if (!why.empty()) {
      ++skipped;
      std::cout << "seed " << seed << ": skipped (" << why << ")\n";
      continue;
    }

    exec::TrainOptions options;
    const double hook_rtol = compress_rtol(plan);
    if (hook_rtol > 0) options.rtol = hook_rtol;
    const Outcome outcome = train_threads(model, plan, planned, options);

    if (!outcome.all_done()) {
      if (layout_rejected(outcome)) {
        ++rejected;
        std::string message;
        for (const RankError& e : outcome.errors)
          if (e.kind == ErrorKind::runtime) message = e.message;
        std::cout << "seed " << seed << ": layout rejected (" << message << ")\n";
        continue;
      }
      ++failed;
      std::ostringstream out;
      for (std::size_t rank = 0; rank < outcome.errors.size(); ++rank)
        out << "  rank " << rank << ": "
            << (outcome.errors[rank].kind == ErrorKind::none ? "finished" : outcome.errors[rank].message) << "\n";
      ADD_FAILURE() << "not every rank finished (" << elapsed() << " s):\n" << out.str() << repro;
      continue;
    }

    const std::vector<std::string> problems =
        parity_problems(outcome.summary, options, hook_rtol > 0 ? hook_rtol : 1e-5, hook_rtol > 0);
    if (!problems.empty()) {
      ++failed;
      std::ostringstream out;
      for (const std::string& problem : problems) out << "  " << problem << "\n";
      ADD_FAILURE() << "training does not match local training:\n"
                    << out.str() << repro << "\n"
                    << exec::training_text(outcome.summary);
      continue;
    }
    ++trained;
    if (diverging(outcome.summary)) ++diverged;
    std::cout << "seed " << seed << ": trained (" << plan.world_size << " ranks, " << elapsed() << " s"
              << (diverging(outcome.summary) ? ", diverges by design" : "") << ")\n";
  }

  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "train properties: " << seed_list.size() << " seeds, " << trained << " trained (" << diverged
            << " diverging by design), " << skipped << " skipped, " << rejected << " layout rejected, " << failed
            << " failed, " << seconds << " s\n";
  // Not vacuous: at least half of the seeds really trained and passed.
  EXPECT_GE(2 * trained, static_cast<int>(seed_list.size()))
      << trained << " trained, " << skipped << " skipped, " << rejected << " layout rejected, " << failed << " failed";
}

}  // namespace
}  // namespace stratsim::test
