// What `stratsim run --train` can train, how ranks ship their results to rank 0, and the
// parity report rank 0 writes.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "stratsim/core/run_analysis.hpp"
#include "stratsim/exec/train.hpp"
#include "train_numerics.hpp"

namespace stratsim::exec {

namespace {

// Each leaf runs once per forward and every trainable parameter is used: a leaf called twice
// would need one saved input per call, and an unused parameter has no gradient (PyTorch skips it
// in the optimizer; FSDP still reduces its unit).
std::string forward_use_reason(const core::Model& model) {
  std::vector<int> uses(model.modules.size(), 0);
  std::vector<bool> used(model.params.size(), false);
  for (const core::ForwardStep& step : core::flat_forward(model)) {
    if (step.kind == core::ForwardStep::Kind::param_matmul) {
      used[step.index] = true;
      continue;
    }
    ++uses[step.index];
    for (int p : model.modules[step.index].params) used[p] = true;
  }
  for (std::size_t m = 0; m < model.modules.size(); ++m)
    if (uses[m] > 1)
      return fmt::format("module \"{}\" runs {} times in one forward; --train keeps one saved input per module",
                         model.modules[m].fqn, uses[m]);
  for (std::size_t p = 0; p < model.params.size(); ++p)
    if (model.params[p].requires_grad && !used[p])
      return fmt::format("parameter {} is never used in forward; --train needs every trainable parameter used",
                         model.params[p].fqn);
  return "";
}

// DTensor splits a sequence unevenly (the last ranks get fewer positions); --train's layouts
// are even. A sequence-sharded input is each rank's own positions, so only a replicated one can
// be split unevenly later.
std::string uneven_sequence_reason(const core::Model& model, const core::Plan& plan, const core::PlanResult& planned) {
  const std::int64_t seq = plan.sequence_length(model.seq_len);
  if (seq <= 0 || planned.input_placement == core::Placement::shard(1)) return "";
  const int tp = planned.program.mesh.group_size(planned.input_dims);
  if (seq % tp == 0) return "";
  for (const core::ProgramOp& op : planned.program.ops)
    if (op.type == core::OpType::collective &&
        (op.from == core::Placement::shard(1) || op.to == core::Placement::shard(1)))
      return fmt::format("op {} \"{}\" splits a sequence of {} positions over {} ranks; --train needs even shards",
                         op.id, op.name, seq, tp);
  for (const core::TpBoundary& boundary : planned.tp_inputs)  // a Replicate input taken as its local chunk
    if (boundary.desired == core::Placement::shard(1))
      return fmt::format("\"{}\" splits a sequence of {} positions over {} ranks; --train needs even shards",
                         model.modules[boundary.module].fqn, seq, tp);
  return "";
}

}  // namespace

std::string train_unsupported_reason(const core::Model& model, const core::Plan& plan,
                                     const core::PlanResult& planned) {
  std::string why = train::unsupported_reason(model);
  if (why.empty()) why = forward_use_reason(model);
  if (!why.empty()) return why;
  if (plan.loss_parallel)
    return "loss_parallel (a cross entropy over sharded logits) has no --train numerics yet; --train's loss is the "
           "mean squared error, and `stratsim run` without --train executes loss_parallel's all-reduces";
  if (plan.optimizer.max_norm > 0)
    return "optimizer.max_norm (clip_grad_norm_) has no --train numerics yet; `stratsim run` without --train "
           "executes its all-reduce and kernels";
  if (plan.optimizer.grad_scaler)
    return "optimizer.grad_scaler (loss scaling) has no --train numerics yet (parity is checked in float32, which "
           "never scales); `stratsim run` without --train executes its all-reduces and kernels";
  for (const core::PlanStep& step : plan.steps) {
    if (const auto* fsdp2 = std::get_if<core::FullyShard2Step>(&step.body))
      for (const auto& dtype : {fsdp2->param_dtype, fsdp2->reduce_dtype, fsdp2->output_dtype})
        if (dtype && *dtype != core::DType::float32)
          return fmt::format("{}: mixed precision ({}) has no numerics in --train yet; parity is checked in float32",
                             step.where, core::dtype_name(*dtype));
    const auto* shard = std::get_if<core::FullyShardStep>(&step.body);
    if (shard == nullptr) continue;
    for (const auto& dtype : {shard->param_dtype, shard->reduce_dtype, shard->buffer_dtype})
      if (dtype && *dtype != core::DType::float32)
        return fmt::format("{}: mixed precision ({}) has no numerics in --train yet; parity is checked in float32",
                           step.where, core::dtype_name(*dtype));
  }
  for (const core::FsdpParamGroupReport& group : planned.fsdp2)
    if (group.shard_numel > 0 && group.unsharded_numel == group.shard_numel &&
        !plan.torch_version.fsdp2_gathers_one_rank())
      return fmt::format(
          "FSDP2 group {} shards over one rank, which PyTorch {} copies instead of gathering; --train needs "
          "groups of two or more ranks",
          group.module.empty() ? model.name : group.module, plan.torch_version.str());
  if (std::string why = uneven_sequence_reason(model, plan, planned); !why.empty()) return why;
  for (std::size_t p = 0; p < planned.params.size(); ++p) {
    const core::ParamLayout& layout = planned.params[p];
    if (layout.tp_dims.empty()) continue;
    if (layout.tp_dims != planned.input_dims)
      return fmt::format(
          "parameter {} is a DTensor on mesh dims {} but the model's first tensor-parallel module is "
          "on {}; --train supports one tensor-parallel dimension set",
          model.params[p].fqn, planned.program.mesh.describe_dims(layout.tp_dims),
          planned.program.mesh.describe_dims(planned.input_dims));
    if (!layout.placement.is_shard()) continue;
    const int tp = planned.program.mesh.group_size(layout.tp_dims);
    const std::int64_t extent = model.params[p].shape[layout.placement.dim];
    if (extent % tp != 0)
      return fmt::format("parameter {} dim {} = {} does not split evenly over {} ranks; --train needs even shards",
                         model.params[p].fqn, layout.placement.dim, extent, tp);
  }
  return "";
}

// ------------------------------------------------------------------------------------------------
// Records through the store: JSON, the timing record in the executor's own encoding.

namespace {

// JSON has no infinity or NaN (a parameter read before its all-gather is NaN): spell them.
nlohmann::json number(double value) {
  if (std::isfinite(value)) return value;
  return std::isnan(value) ? "nan" : (value > 0 ? "inf" : "-inf");
}

double number_of(const nlohmann::json& value) {
  if (value.is_number()) return value.get<double>();
  const std::string text = value.get<std::string>();
  if (text == "nan") return std::numeric_limits<double>::quiet_NaN();
  return text == "-inf" ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
}

nlohmann::json numbers(const std::vector<double>& values) {
  nlohmann::json out = nlohmann::json::array();
  for (double value : values) out.push_back(number(value));
  return out;
}

std::vector<double> numbers_of(const nlohmann::json& values) {
  std::vector<double> out;
  for (const auto& value : values) out.push_back(number_of(value));
  return out;
}

}  // namespace

std::string encode(const TrainRecord& record) {
  nlohmann::json params = nlohmann::json::array();
  for (const HeldParam& p : record.params)
    params.push_back({p.fqn, p.slice, p.synchronised, number(p.max_abs_diff), number(p.max_abs_reference), p.mismatches,
                      std::to_string(p.digest)});
  nlohmann::json doc = {{"rank", record.rank},
                        {"params", params},
                        {"squared_error", numbers(record.squared_error)},
                        {"state_dict_all_gathers", record.state_dict_all_gathers},
                        {"timing", encode(record.timing)},
                        {"global_rows", record.global_rows},
                        {"output_features", record.output_features},
                        {"optimizer_after", record.optimizer_after},
                        {"reference_loss", numbers(record.reference_loss)}};
  return doc.dump();
}

TrainRecord decode_train_record(const std::string& text) {
  const nlohmann::json doc = nlohmann::json::parse(text);
  TrainRecord record;
  record.rank = doc.at("rank");
  for (const auto& p : doc.at("params")) {
    HeldParam held;
    held.fqn = p.at(0);
    held.slice = p.at(1);
    held.synchronised = p.at(2);
    held.max_abs_diff = number_of(p.at(3));
    held.max_abs_reference = number_of(p.at(4));
    held.mismatches = p.at(5);
    held.digest = std::stoull(p.at(6).get<std::string>());
    record.params.push_back(std::move(held));
  }
  record.squared_error = numbers_of(doc.at("squared_error"));
  record.state_dict_all_gathers = doc.at("state_dict_all_gathers");
  record.timing = decode_record(doc.at("timing").get<std::string>());
  record.global_rows = doc.at("global_rows");
  record.output_features = doc.at("output_features");
  record.optimizer_after = doc.at("optimizer_after").get<std::vector<int>>();
  record.reference_loss = numbers_of(doc.at("reference_loss"));
  return record;
}

// ------------------------------------------------------------------------------------------------
// Summary.

namespace {

TrainingSummary::Param merge_param(const std::vector<TrainRecord>& records, std::size_t p) {
  TrainingSummary::Param merged;
  merged.fqn = records.front().params[p].fqn;
  std::map<std::string, std::set<std::uint64_t>> digests;  // slice -> distinct bit patterns
  for (const TrainRecord& record : records) {
    const HeldParam& held = record.params[p];
    merged.synchronised = merged.synchronised && held.synchronised;
    merged.max_abs_diff = std::max(merged.max_abs_diff, held.max_abs_diff);
    merged.max_abs_reference = std::max(merged.max_abs_reference, held.max_abs_reference);
    merged.mismatches += held.mismatches;
    digests[held.slice].insert(held.digest);
  }
  for (const auto& [slice, bits] : digests) {
    merged.slices.push_back(slice);
    merged.replicas_identical = merged.replicas_identical && bits.size() == 1;
  }
  return merged;
}

}  // namespace

// The Adam criterion (see summarize).
constexpr double kAdamLossRtol = 1e-6;
constexpr double kAdamParamFactor = 100;

TrainingSummary summarize(const core::Model& model, const core::Plan& plan, const core::PlanResult& planned,
                          const std::vector<TrainRecord>& records, const TrainOptions& options) {
  TrainingSummary summary;
  const TrainRecord& first = records.front();
  summary.model = model.name;
  summary.plan = plan.origin;
  summary.world_size = static_cast<int>(records.size());
  summary.iterations = planned.program.iterations;
  summary.global_rows = first.global_rows;
  summary.optimizer_steps_after = first.optimizer_after;
  summary.reference_loss = first.reference_loss;
  summary.distributed_loss.assign(summary.reference_loss.size(), 0.0);
  const double elements = static_cast<double>(first.global_rows) * static_cast<double>(first.output_features);
  for (const TrainRecord& record : records)
    for (std::size_t i = 0; i < record.squared_error.size() && i < summary.distributed_loss.size(); ++i)
      summary.distributed_loss[i] += record.squared_error[i] / elements;
  for (std::size_t p = 0; p < first.params.size(); ++p) summary.params.push_back(merge_param(records, p));
  for (const core::ProgramOp& op : planned.program.ops)
    if (op.type == core::OpType::collective) ++summary.collectives[op.comm_key];
  summary.state_dict_all_gathers = first.state_dict_all_gathers;
  summary.atol = options.atol;
  summary.rtol = options.rtol;

  const bool diverging =
      std::any_of(summary.params.begin(), summary.params.end(), [](const auto& p) { return !p.synchronised; });
  bool replicas_ok = true, elements_ok = true;
  double max_diff = 0;
  for (const TrainingSummary::Param& p : summary.params) {
    // Unsynchronised parameters train on each replica's own rows, so their replicas must differ.
    replicas_ok = replicas_ok && p.replicas_identical == p.synchronised;
    if (!p.synchronised) continue;
    elements_ok = elements_ok && p.mismatches == 0;
    max_diff = std::max(max_diff, p.max_abs_diff);
  }
  bool losses_ok = summary.reference_loss.size() == summary.distributed_loss.size();
  for (std::size_t i = 0; losses_ok && i < summary.reference_loss.size(); ++i)
    losses_ok = std::abs(summary.distributed_loss[i] - summary.reference_loss[i]) <=
                kAdamLossRtol * std::abs(summary.reference_loss[i]);
  const bool adam = plan.optimizer.kind != core::OptimizerKind::sgd;
  if (diverging) {
    summary.criterion = "replicas";
    summary.passed = replicas_ok;
    summary.notes.push_back(
        "some parameters are not averaged over every data-parallel dim (replicate's ignored_modules, no wrapper, or "
        "a wrapper over fewer mesh dims than the batch is split over): their replicas train on different rows, so "
        "the model diverges from local training by design; checked instead: synchronised parameters identical on "
        "every replica, the others different");
  } else if (elements_ok || !adam) {
    summary.criterion = "parameters";
    summary.passed = replicas_ok && elements_ok;
  } else {
    // Adam divides each element's update by its gradient's running magnitude: where a gradient
    // nearly cancels, last-bit differences of summation order become update differences up to lr.
    summary.criterion = "losses";
    summary.passed = replicas_ok && losses_ok && max_diff <= kAdamParamFactor * options.atol;
    summary.notes.push_back(fmt::format(
        "Adam: some elements differ by more than the tolerance (max {:.3g}); Adam divides each update by the "
        "gradient's running magnitude, so where a gradient nearly cancels, last-bit differences of summation order "
        "become update differences up to lr. Judged as PyTorch's Adam parity tests judge it: losses within {:g} "
        "relative, parameters within {:g} x atol, replicas identical. Adam is nearly scale-invariant: run SGD to "
        "check averaging factors element by element",
        max_diff, kAdamLossRtol, kAdamParamFactor));
  }
  const bool compressed = std::any_of(planned.ddp.begin(), planned.ddp.end(), [](const core::DdpReport& ddp) {
    return ddp.comm_hook == core::CommHook::fp16_compress || ddp.comm_hook == core::CommHook::bf16_compress;
  });
  if (compressed)
    summary.notes.push_back(
        "a compress hook rounds gradients to 16 bits: compare with a looser --rtol (fp16 1e-3, "
        "bf16 1.6e-2, torch.testing's defaults for those dtypes)");
  return summary;
}

std::string training_text(const TrainingSummary& s) {
  std::string out =
      fmt::format("stratsim run --train: model {}, plan {}, {} ranks, {} micro-steps of {} rows (global batch)\n",
                  s.model, s.plan, s.world_size, s.iterations, s.global_rows);
  out += fmt::format("parity with local training (|distributed - local| <= {:g} + {:g} |local|): {}{}\n\n", s.atol,
                     s.rtol, s.passed ? "PASSED" : "FAILED",
                     s.criterion == "parameters" ? "" : fmt::format(" (judged on {})", s.criterion));
  out += fmt::format("{:>5}  {:>16}  {:>18}  {:>10}  {}\n", "step", "loss (local)", "loss (distributed)", "rel. diff",
                     "optimizer");
  for (std::size_t i = 0; i < s.reference_loss.size(); ++i) {
    const double ref = s.reference_loss[i], got = i < s.distributed_loss.size() ? s.distributed_loss[i] : 0;
    const bool step = std::find(s.optimizer_steps_after.begin(), s.optimizer_steps_after.end(),
                                static_cast<int>(i) + 1) != s.optimizer_steps_after.end();
    out += fmt::format("{:>5}  {:>16.9g}  {:>18.9g}  {:>10.2e}  {}\n", i + 1, ref, got,
                       ref != 0 ? std::abs(got - ref) / std::abs(ref) : 0.0, step ? "step" : "accumulate");
  }
  std::size_t width = 9;
  for (const auto& p : s.params) width = std::max(width, p.fqn.size());
  out += fmt::format("\n{:<{}}  {:<22}  {:>10}  {:>10}  {:>10}  {}\n", "parameter", width, "held as", "max |diff|",
                     "max |local|", "mismatches", "replicas");
  for (const auto& p : s.params) {
    const std::string& first = p.slices.front();
    std::string held = p.slices.size() == 1
                           ? first
                           : fmt::format("{} shards, {}", p.slices.size(), first.substr(first.find(" of ") + 4));
    if (held.size() > 22) held = held.substr(0, 22);
    const std::string replicas =
        !p.synchronised ? (p.replicas_identical ? "IDENTICAL (expected to differ)" : "differ (not synchronised)")
                        : (p.replicas_identical ? "identical" : "DIFFER");
    out += fmt::format("{:<{}}  {:<22}  {:>10.3g}  {:>10.4g}  {:>10}  {}\n", p.fqn, width, held, p.max_abs_diff,
                       p.max_abs_reference, p.mismatches, replicas);
  }
  out += "\ncollectives executed (the program's, over the run):";
  for (const auto& [key, count] : s.collectives) out += fmt::format(" {} {},", key, count);
  if (!s.collectives.empty()) out.pop_back();
  out += "\n";
  if (s.state_dict_all_gathers > 0)
    out += fmt::format("full state dict: {} FSDP all-gathers after the last step\n", s.state_dict_all_gathers);
  for (const std::string& note : s.notes) out += "note: " + note + "\n";
  return out;
}

nlohmann::json training_json(const TrainingSummary& s) {
  nlohmann::json params = nlohmann::json::array();
  for (const auto& p : s.params)
    params.push_back({{"fqn", p.fqn},
                      {"slices", p.slices},
                      {"synchronised", p.synchronised},
                      {"max_abs_diff", number(p.max_abs_diff)},
                      {"max_abs_local", number(p.max_abs_reference)},
                      {"mismatches", p.mismatches},
                      {"replicas_identical", p.replicas_identical}});
  return {{"format", "stratsim.training"},
          {"version", 1},
          {"model", s.model},
          {"plan", s.plan},
          {"world_size", s.world_size},
          {"iterations", s.iterations},
          {"global_rows", s.global_rows},
          {"optimizer_steps_after", s.optimizer_steps_after},
          {"loss", {{"local", numbers(s.reference_loss)}, {"distributed", numbers(s.distributed_loss)}}},
          {"tolerance", {{"atol", s.atol}, {"rtol", s.rtol}}},
          {"passed", s.passed},
          {"criterion", s.criterion},
          {"params", params},
          {"collectives", s.collectives},
          {"state_dict_all_gathers", s.state_dict_all_gathers},
          {"notes", s.notes}};
}

}  // namespace stratsim::exec
