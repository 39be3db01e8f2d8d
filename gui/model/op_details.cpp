#include "model/op_details.hpp"

#include "model/table_models.hpp"
#include "model/viewport.hpp"
#include "stratsim/core/dtype.hpp"

namespace stratsim::gui {
namespace {

QString text(const std::string& value) { return QString::fromStdString(value); }

QString joined(const std::vector<std::string>& items, int limit = 12) {
  QStringList out;
  for (std::size_t i = 0; i < items.size() && static_cast<int>(i) < limit; ++i) out << text(items[i]);
  if (static_cast<int>(items.size()) > limit) out << QStringLiteral("... (%1 in all)").arg(items.size());
  return out.join(QStringLiteral(", "));
}

}  // namespace

OpDetails opDetails(const TimelineStore& store, OpRef ref) {
  OpDetails details;
  if (!ref.valid() || ref.recorded >= store.recordedRanks() ||
      static_cast<std::size_t>(ref.op) >= store.program().ops.size())
    return details;
  const core::ProgramOp& op = store.op(ref);
  const core::OpTiming& t = store.timing(ref);
  details.title = text(op.name);
  auto add = [&](const char* name, const QString& value) {
    details.fields.push_back({QString::fromLatin1(name), value});
  };
  add("kind", category_name(store.category(op.id)));
  add("rank", store.rankLabel(ref.recorded));
  add("stream", text(store.program().streams[op.stream]));
  add("phase", text(std::string(core::phase_name(op.phase))));
  add("iteration", QString::number(op.iteration));
  add("module", op.module.empty() ? QStringLiteral("<root>") : text(op.module));
  if (op.type == core::OpType::compute) {
    if (!op.op_class.empty()) add("op class", text(op.op_class));
    add("FLOPs", QString::number(op.flops, 'g', 4));
    add("bytes accessed", formatBytes(static_cast<double>(op.bytes_accessed)));
  } else {
    if (!op.comm_key.empty()) add("op (CommDebugMode)", text(op.comm_key));
    add("bytes", formatBytes(static_cast<double>(op.bytes)));
    add("in / out per rank",
        formatBytes(static_cast<double>(op.input_bytes)) + " / " + formatBytes(static_cast<double>(op.output_bytes)));
    add("dtype", text(std::string(core::dtype_name(op.dtype))));
    if (!op.reason.empty()) add("reason", text(op.reason));
    if (!op.params.empty()) add("parameters", joined(op.params));
    const int run = store.collectiveRunOf(ref);
    if (op.group >= 0 && static_cast<std::size_t>(op.group) < store.program().groups.size())
      add("group", text(store.program().groups[op.group].name));
    if (run >= 0) {
      const core::CollectiveRun& r = store.result().collectives[run];
      const core::CollectiveStats& stats = store.analysis().collectives[run];
      add("group ranks", text(core::describe_ranks(r.ranks, 6)));
      add("instance", QString::number(r.instance));
      add("algorithm", text(r.algorithm));
      add("algbw / busbw",
          QString::number(stats.algbw / 1e9, 'f', 2) + " / " + QString::number(stats.busbw / 1e9, 'f', 2) + " GB/s");
    }
    add("issued", formatTime(t.issue));
    add("waited", formatTime(t.start - t.issue));
  }
  add("start", formatTime(t.start));
  add("end", formatTime(t.end));
  add("duration", formatTime(t.end - t.start));
  for (int dep : op.deps) details.dependencies.push_back({ref.recorded, dep});
  details.dependants = store.dependantsOf(ref);
  return details;
}

}  // namespace stratsim::gui
