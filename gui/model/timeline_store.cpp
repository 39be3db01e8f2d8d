#include "model/timeline_store.hpp"

#include <algorithm>

#include "stratsim/core/run_analysis.hpp"

namespace stratsim::gui {
namespace {

std::uint64_t op_rank_key(int op, int rank) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(op)) << 32) | static_cast<std::uint32_t>(rank);
}

}  // namespace

Category category_of(const core::ProgramOp& op) {
  if (op.type == core::OpType::compute) return Category::compute;
  static_assert(static_cast<int>(core::CollectiveKind::scatter) + 1 == kCategoryCount - 1,
                "one category per collective kind: add the new kind to Category");
  return static_cast<Category>(static_cast<int>(op.kind) + 1);
}

QString category_name(Category category) {
  if (category == Category::compute) return QStringLiteral("compute");
  return QString::fromStdString(
      std::string(core::collective_kind_name(static_cast<core::CollectiveKind>(static_cast<int>(category) - 1))));
}

TimelineStore::TimelineStore(core::Timeline timeline) : timeline_(std::move(timeline)) {
  // Throughput needs the workload the producer wrote (version 1 files and programs have none: 0).
  analysis_ = core::analyse(timeline_.program, timeline_.result, timeline_.workload);
  categories_.reserve(timeline_.program.ops.size());
  for (const core::ProgramOp& op : timeline_.program.ops) categories_.push_back(category_of(op));
  buildLanes();
  buildInstanceIndex();
}

void TimelineStore::buildLanes() {
  const core::Program& program = timeline_.program;
  stream_ops_.assign(program.streams.size(), {});
  position_.assign(program.ops.size(), -1);
  dependants_.assign(program.ops.size(), {});
  for (const core::ProgramOp& op : program.ops) {
    if (op.stream < 0 || static_cast<std::size_t>(op.stream) >= program.streams.size()) continue;
    position_[op.id] = static_cast<std::int32_t>(stream_ops_[op.stream].size());
    stream_ops_[op.stream].push_back(op.id);
    for (int dep : op.deps) dependants_[dep].push_back(op.id);
  }
  lanes_.clear();
  lanes_.reserve(timeline_.result.timings.size() * program.streams.size());
  for (std::size_t s = 0; s < timeline_.result.timings.size(); ++s) {
    const std::vector<core::OpTiming>& timings = timeline_.result.timings[s];
    for (std::size_t stream = 0; stream < program.streams.size(); ++stream) {
      Lane lane;
      lane.recorded = static_cast<int>(s);
      lane.stream = static_cast<int>(stream);
      lane.ops = &stream_ops_[stream];
      lane.busy_before.resize(lane.ops->size() + 1, 0.0);
      for (std::size_t i = 0; i < lane.ops->size(); ++i) {
        const core::OpTiming& t = timings[(*lane.ops)[i]];
        lane.busy_before[i + 1] = lane.busy_before[i] + (t.end - t.start);
      }
      lanes_.push_back(std::move(lane));
    }
  }
}

// Only the recorded ranks' instances are looked up, so only they are indexed.
void TimelineStore::buildInstanceIndex() {
  std::vector<int> recorded_of(static_cast<std::size_t>(timeline_.result.world_size), -1);
  for (std::size_t s = 0; s < timeline_.result.recorded.size(); ++s)
    for (int rank : timeline_.result.recorded[s]) recorded_of[rank] = static_cast<int>(s);
  const auto& runs = timeline_.result.collectives;
  for (std::size_t i = 0; i < runs.size(); ++i)
    for (int rank : runs[i].ranks)
      if (rank >= 0 && rank < timeline_.result.world_size && recorded_of[rank] >= 0 &&
          timeline_.result.recorded[recorded_of[rank]].front() == rank)
        run_by_op_rank_.emplace_back(op_rank_key(runs[i].op, rank), static_cast<std::int32_t>(i));
  std::sort(run_by_op_rank_.begin(), run_by_op_rank_.end());
}

QString TimelineStore::rankLabel(int recorded) const {
  const core::RunResult& r = timeline_.result;
  const std::vector<int> ranks =
      static_cast<std::size_t>(recorded) < r.recorded.size() ? r.recorded[recorded] : std::vector<int>{recorded};
  const QString list = QString::fromStdString(core::describe_ranks(ranks, 2));
  if (r.mode == "unscheduled") return QStringLiteral("every rank (one SPMD program)");
  if (r.mode == "representative") return QStringLiteral("ranks %1 (representative)").arg(list);
  return ranks.size() == 1 ? QStringLiteral("rank %1").arg(list) : QStringLiteral("ranks %1").arg(list);
}

OpRef TimelineStore::opAt(int recorded, int stream, double t, double slack) const {
  if (recorded < 0 || recorded >= recordedRanks() || stream < 0 || stream >= streams()) return {};
  const std::vector<std::int32_t>& ops = stream_ops_[stream];
  const std::vector<core::OpTiming>& timings = timeline_.result.timings[recorded];
  // First op starting after t; the one before it is the candidate covering t.
  const auto after = std::upper_bound(ops.begin(), ops.end(), t,
                                      [&](double time, std::int32_t id) { return time < timings[id].start; });
  OpRef best;
  double best_distance = slack + 1e-300;  // a distance equal to the slack still counts
  for (auto it = after == ops.begin() ? after : after - 1; it != ops.end() && it <= after; ++it) {
    const core::OpTiming& span = timings[*it];
    const double distance = t < span.start ? span.start - t : (t > span.end ? t - span.end : 0.0);
    if (distance < best_distance || (distance == 0 && !best.valid())) {
      best = {recorded, *it};
      best_distance = distance;
      if (distance == 0) break;
    }
  }
  return best;
}

OpRef TimelineStore::nextOnLane(OpRef op) const {
  if (!op.valid()) return {};
  const auto& ops = stream_ops_[timeline_.program.ops[op.op].stream];
  const std::size_t at = static_cast<std::size_t>(position_[op.op]) + 1;
  return at < ops.size() ? OpRef{op.recorded, ops[at]} : OpRef{};
}

OpRef TimelineStore::previousOnLane(OpRef op) const {
  if (!op.valid() || position_[op.op] <= 0) return {};
  const auto& ops = stream_ops_[timeline_.program.ops[op.op].stream];
  return {op.recorded, ops[position_[op.op] - 1]};
}

std::vector<OpRef> TimelineStore::find(const QString& text) const {
  std::vector<OpRef> found;
  if (text.isEmpty()) return found;
  std::vector<int> matching;
  for (const core::ProgramOp& op : timeline_.program.ops) {
    const bool hit = QString::fromStdString(op.name).contains(text, Qt::CaseInsensitive) ||
                     QString::fromStdString(op.module).contains(text, Qt::CaseInsensitive) ||
                     category_name(categories_[op.id]).contains(text, Qt::CaseInsensitive);
    if (hit) matching.push_back(op.id);
  }
  for (int s = 0; s < recordedRanks(); ++s)
    for (int id : matching) found.push_back({s, id});
  std::stable_sort(found.begin(), found.end(), [&](OpRef a, OpRef b) { return timing(a).start < timing(b).start; });
  return found;
}

int TimelineStore::collectiveRunOf(OpRef op) const {
  if (!op.valid() || timeline_.program.ops[op.op].type != core::OpType::collective) return -1;
  const int rank = timeline_.result.recorded.empty() ? op.recorded : timeline_.result.recorded[op.recorded].front();
  const std::uint64_t key = op_rank_key(op.op, rank);
  const auto it = std::lower_bound(run_by_op_rank_.begin(), run_by_op_rank_.end(), std::make_pair(key, INT32_MIN));
  return it != run_by_op_rank_.end() && it->first == key ? it->second : -1;
}

std::vector<OpRef> TimelineStore::instancesOf(OpRef op) const {
  const int run = collectiveRunOf(op);
  if (run < 0) return {op};
  std::vector<OpRef> instances;
  for (int s = 0; s < recordedRanks(); ++s)
    if (collectiveRunOf({s, op.op}) == run) instances.push_back({s, op.op});
  return instances;
}

std::vector<OpRef> TimelineStore::dependantsOf(OpRef op) const {
  std::vector<OpRef> out;
  if (!op.valid()) return out;
  for (int id : dependants_[op.op]) out.push_back({op.recorded, id});
  return out;
}

std::size_t TimelineStore::memoryBytes() const {
  std::size_t bytes = sizeof(*this) + categories_.capacity() * sizeof(Category) +
                      position_.capacity() * sizeof(std::int32_t) +
                      run_by_op_rank_.capacity() * sizeof(run_by_op_rank_[0]) + lanes_.capacity() * sizeof(Lane);
  for (const auto& ops : stream_ops_) bytes += ops.capacity() * sizeof(std::int32_t);
  for (const auto& deps : dependants_) bytes += sizeof(deps) + deps.capacity() * sizeof(std::int32_t);
  for (const Lane& lane : lanes_) bytes += lane.busy_before.capacity() * sizeof(double);
  return bytes;
}

}  // namespace stratsim::gui
