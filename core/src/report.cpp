#include "stratsim/core/report.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace stratsim::core {
namespace {

std::string thousands(std::int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return value < 0 ? "-" + out : out;
}

std::string human(std::int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1073741824.0) return fmt::format("{:.2f} GiB", b / 1073741824.0);
  if (b >= 1048576.0) return fmt::format("{:.2f} MiB", b / 1048576.0);
  if (b >= 1024.0) return fmt::format("{:.2f} KiB", b / 1024.0);
  return fmt::format("{} B", bytes);
}

std::string param_list(const std::vector<std::string>& params, std::size_t limit = 6) {
  std::string out;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (i == limit) {
      out += fmt::format(", ... ({} params)", params.size());
      break;
    }
    out += (i ? ", " : "") + params[i];
  }
  return out;
}

nlohmann::json bucket_json(const std::vector<DdpBucket>& buckets) {
  nlohmann::json out = nlohmann::json::array();
  for (const DdpBucket& b : buckets)
    out.push_back({{"params", b.params}, {"indices", b.indices}, {"bytes", b.bytes}, {"size_limit", b.size_limit}});
  return out;
}

}  // namespace

std::string format_bytes(std::int64_t bytes) { return fmt::format("{} ({} B)", human(bytes), thousands(bytes)); }

std::string text_report(const Model& model, const Plan& plan, const PlanResult& result) {
  std::string out;
  auto line = [&](const std::string& text) { out += text + "\n"; };
  std::string coord;
  for (std::size_t d = 0; d < result.coordinate.size(); ++d)
    coord += fmt::format("{}{}={}", d ? ", " : "", plan.mesh.dim_names()[d], result.coordinate[d]);
  std::string shape;
  for (std::size_t d = 0; d < plan.mesh.shape().size(); ++d)
    shape += fmt::format("{}{}{}", d ? " x " : "", plan.mesh.dim_names()[d] + "=", plan.mesh.shape()[d]);
  line(fmt::format("stratsim plan: model {} ({} parameters, {}), plan {}", model.name, thousands(model.total_numel()),
                   human(model.total_numel() * dtype_size(model.params.front().dtype)), plan.origin));
  line(fmt::format("world {} ranks, mesh {}, PyTorch {} rules; showing rank {} ({})", plan.world_size, shape,
                   plan.torch_version.str(), result.rank, coord));
  for (const std::string& warning : result.warnings) line("warning: " + warning);

  for (const DdpReport& ddp : result.ddp) {
    line("");
    line(fmt::format("DDP (replicate) on \"{}\" over group {} ({} ranks): {} parameters",
                     ddp.module.empty() ? model.name : ddp.module, ddp.group, ddp.group_size, ddp.params.size()));
    auto print = [&](const char* title, const std::vector<DdpBucket>& buckets) {
      line(fmt::format("  {}: {} bucket{}", title, buckets.size(), buckets.size() == 1 ? "" : "s"));
      for (std::size_t b = 0; b < buckets.size(); ++b)
        line(fmt::format("    bucket {}: {:>14} B  [{}]", b, thousands(buckets[b].bytes),
                         param_list(buckets[b].params)));
    };
    print("construction-time buckets", ddp.initial);
    if (!ddp.rebuilt.empty()) print("rebuilt buckets (gradient-ready order)", ddp.rebuilt);
    line(fmt::format("  compiled DDP (Inductor fusion): ddp_buckets = {}", ddp.compiled.size()));
  }
  if (!result.fsdp.empty()) {
    line("");
    line(fmt::format("FSDP units: {}", result.fsdp.size()));
    for (const FsdpUnitReport& u : result.fsdp) {
      if (u.params.empty()) {
        line(fmt::format("  {:<24} no parameters left (no flat parameter, no collectives){}",
                         u.module.empty() ? model.name : u.module, u.root ? ", root" : ""));
        continue;
      }
      line(fmt::format("  {:<24} {} group {}{}{}: N={} S={} padded={} [{}]", u.module.empty() ? model.name : u.module,
                       strategy_name(u.strategy), u.group,
                       u.replicate_group.empty() ? "" : " replicate " + u.replicate_group, u.root ? ", root" : "",
                       thousands(u.numel), thousands(u.shard_numel), thousands(u.padded_numel),
                       param_list(u.params, 4)));
    }
  }
  if (!result.fsdp2.empty()) {
    line("");
    line(fmt::format("FSDP2 parameter groups: {}", result.fsdp2.size()));
    for (const FsdpParamGroupReport& g : result.fsdp2)
      if (g.params.empty())
        line(fmt::format("  {:<24} no parameters left (no parameter group, no collectives){}",
                         g.module.empty() ? model.name : g.module, g.root ? ", root" : ""));
      else
        line(fmt::format(
            "  {:<24} group {}{}{}, {}: shard {} of {} elements [{}]", g.module.empty() ? model.name : g.module,
            g.group, g.replicate_group.empty() ? "" : " replicate " + g.replicate_group, g.root ? ", root" : "",
            !g.reshard_after_forward   ? "kept unsharded after forward"
            : g.post_forward_ranks > 0 ? fmt::format("reshards after forward to runs of {} ranks", g.post_forward_ranks)
                                       : "reshards after forward",
            thousands(g.shard_numel), thousands(g.unsharded_numel), param_list(g.params, 4)));
  }
  if (!result.setup.empty()) {
    line("");
    line(fmt::format("setup (while the plan is applied, before iteration 1): {} collectives", result.setup.size()));
    for (const CollectiveRecord& c : result.setup)
      line(fmt::format("  {:<10} {:<40} {:<6} {:>14} B {:<8} {}", phase_name(c.phase), c.op, c.group,
                       thousands(c.bytes), dtype_name(c.dtype), c.reason));
  }
  for (const IterationRecord& it : result.iterations) {
    line("");
    line(fmt::format("iteration {}{}: {} collectives, {:.4g} GFLOP compute", it.index, it.sync ? "" : " (no_sync)",
                     it.collectives.size(), it.compute_flops / 1e9));
    for (const CollectiveRecord& c : it.collectives)
      line(fmt::format("  {:<10} {:<40} {:<6} {:>14} B {:<8} {}", phase_name(c.phase), c.op, c.group,
                       thousands(c.bytes), dtype_name(c.dtype), c.reason));
  }
  line("");
  line(fmt::format("CommDebugMode counts (iteration {}):",
                   result.iterations.empty() ? 0 : result.iterations.back().index));
  int total = 0;
  for (const auto& [key, count] : result.counts()) {
    line(fmt::format("  {:<44} {}", key, count));
    total += count;
  }
  line(fmt::format("  {:<44} {}", "total", total));
  const MemoryReport& m = result.memory;
  line("");
  line(fmt::format("memory per rank (steady state):"));
  line(fmt::format("  parameters          {}", format_bytes(m.parameters)));
  line(fmt::format("  gradients (peak)    {}", format_bytes(m.gradients)));
  line(fmt::format("  optimizer state     {}", format_bytes(m.optimizer_state)));
  if (m.ddp_bucket_buffers) line(fmt::format("  DDP bucket buffers  {}", format_bytes(m.ddp_bucket_buffers)));
  line(fmt::format("  activations (peak)  {}", format_bytes(m.activations)));
  if (m.unsharded_params_peak)
    line(fmt::format("  unsharded FSDP params (peak) {}", format_bytes(m.unsharded_params_peak)));
  line(fmt::format("  peak                {} at {}", format_bytes(m.peak), m.peak_at));
  const MemoryReport::AtPeak& at = m.at_peak;
  line(
      fmt::format("    held then: resident {}, activations {}, unsharded params {}, gradients {}, "
                  "outputs and temporaries {}",
                  human(at.resident), human(at.activations), human(at.unsharded_params), human(at.gradients),
                  human(at.outputs_and_temporaries)));
  if (m.reserved_peak)
    line(fmt::format("  CUDA reserved (peak) {}; {} with expandable_segments", format_bytes(m.reserved_peak),
                     format_bytes(m.reserved_peak_expandable)));
  if (m.device_memory_bytes)
    line(fmt::format("  device              {}{}", format_bytes(static_cast<std::int64_t>(*m.device_memory_bytes)),
                     m.out_of_memory ? "  ** OUT OF MEMORY **" : ""));
  return out;
}

nlohmann::json json_report(const Model& model, const Plan& plan, const PlanResult& result) {
  using json = nlohmann::json;
  json doc;
  doc["format"] = "stratsim.plan";
  doc["version"] = 1;
  doc["model"] = {{"name", model.name}, {"parameters", model.total_numel()}};
  doc["plan"] = {{"origin", plan.origin},
                 {"world_size", plan.world_size},
                 {"mesh", {{"shape", plan.mesh.shape()}, {"dim_names", plan.mesh.dim_names()}}},
                 {"torch_version", plan.torch_version.str()}};
  doc["rank"] = result.rank;
  doc["coordinate"] = result.coordinate;
  json iterations = json::array();
  std::map<std::string, std::int64_t> bytes_by_group;
  auto collective_json = [&](const CollectiveRecord& c) {
    return json{{"op", c.op},
                {"kind", collective_kind_name(c.kind)},
                {"group", c.group},
                {"ranks", result.group_ranks[c.group_id]},
                {"bytes", c.bytes},
                {"input_bytes", c.input_bytes},
                {"output_bytes", c.output_bytes},
                {"dtype", dtype_name(c.dtype)},
                {"phase", phase_name(c.phase)},
                {"module", c.module},
                {"reason", c.reason},
                {"params", c.params},
                {"program_op", c.op_id}};
  };
  json setup = json::array();
  for (const CollectiveRecord& c : result.setup) setup.push_back(collective_json(c));
  doc["setup"] = std::move(setup);
  for (const IterationRecord& it : result.iterations) {
    json collectives = json::array();
    for (const CollectiveRecord& c : it.collectives) {
      collectives.push_back(collective_json(c));
      if (&it == &result.iterations.back()) bytes_by_group[c.group] += c.bytes;
    }
    iterations.push_back({{"index", it.index},
                          {"sync", it.sync},
                          {"compute_flops", it.compute_flops},
                          {"collectives", std::move(collectives)}});
  }
  doc["iterations"] = std::move(iterations);
  doc["counts"] = result.counts();
  doc["counts_by_phase"] = result.counts_by_phase();
  doc["counts_by_module"] = result.counts_by_module();
  doc["bytes_by_group"] = bytes_by_group;
  json ddp = json::array();
  for (const DdpReport& d : result.ddp)
    ddp.push_back({{"module", d.module},
                   {"group", d.group},
                   {"group_size", d.group_size},
                   {"param_names", d.params},
                   {"initial_buckets", bucket_json(d.initial)},
                   {"rebuilt_buckets", bucket_json(d.rebuilt)},
                   {"compiled", {{"ddp_buckets", d.compiled.size()}, {"buckets", bucket_json(d.compiled)}}}});
  doc["ddp"] = std::move(ddp);
  json fsdp = json::array();
  for (const FsdpUnitReport& u : result.fsdp)
    fsdp.push_back({{"module", u.module},
                    {"strategy", strategy_name(u.strategy)},
                    {"group", u.group},
                    {"replicate_group", u.replicate_group},
                    {"root", u.root},
                    {"params", u.params},
                    {"numel", u.numel},
                    {"shard_numel", u.shard_numel},
                    {"padded_numel", u.padded_numel}});
  doc["fsdp"] = std::move(fsdp);
  json fsdp2 = json::array();
  for (const FsdpParamGroupReport& g : result.fsdp2)
    fsdp2.push_back({{"module", g.module},
                     {"group", g.group},
                     {"replicate_group", g.replicate_group},
                     {"root", g.root},
                     {"reshard_after_forward", g.reshard_after_forward},
                     {"post_forward_ranks", g.post_forward_ranks},
                     {"params", g.params},
                     {"param_shard_numels", g.shard_numels},
                     {"shard_numel", g.shard_numel},
                     {"unsharded_numel", g.unsharded_numel}});
  doc["fsdp2"] = std::move(fsdp2);
  const MemoryReport& m = result.memory;
  doc["memory"] = {{"parameters", m.parameters},
                   {"gradients", m.gradients},
                   {"optimizer_state", m.optimizer_state},
                   {"ddp_bucket_buffers", m.ddp_bucket_buffers},
                   {"activations", m.activations},
                   {"unsharded_params_peak", m.unsharded_params_peak},
                   {"peak", m.peak},
                   {"peak_at", m.peak_at},
                   {"at_peak",
                    {{"resident", m.at_peak.resident},
                     {"activations", m.at_peak.activations},
                     {"unsharded_params", m.at_peak.unsharded_params},
                     {"gradients", m.at_peak.gradients},
                     {"outputs_and_temporaries", m.at_peak.outputs_and_temporaries}}},
                   {"reserved_peak", m.reserved_peak},
                   {"reserved_peak_expandable", m.reserved_peak_expandable},
                   {"device_memory", m.device_memory_bytes ? json(*m.device_memory_bytes) : json(nullptr)},
                   {"out_of_memory", m.out_of_memory}};
  doc["warnings"] = result.warnings;
  return doc;
}

nlohmann::json memory_history_document(const PlanResult& result) {
  using nlohmann::json;
  json trace = json::array();
  for (const MemoryEvent& event : result.memory_events)
    trace.push_back({event.allocate ? "alloc" : "free_completed", static_cast<std::uint64_t>(event.tensor) + 1,
                     event.bytes, event.stream, event.op});
  return {{"source", "stratsim plan"}, {"rank", result.rank}, {"streams", result.memory_streams}, {"trace", trace}};
}

}  // namespace stratsim::core
