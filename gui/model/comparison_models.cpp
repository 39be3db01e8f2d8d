#include "model/comparison_models.hpp"

#include <algorithm>
#include <cmath>

#include "model/viewport.hpp"
#include "stratsim/core/run_analysis.hpp"

namespace stratsim::gui {
namespace {

QString text(const std::string& value) { return QString::fromStdString(value); }
QString seconds(double value) { return QString::fromStdString(core::format_seconds(value)); }
QVariant alignment(bool numeric) {
  return QVariant::fromValue(numeric ? Qt::AlignRight | Qt::AlignVCenter : Qt::AlignLeft | Qt::AlignVCenter);
}
QVariant header(const char* const* names, int count, int section, Qt::Orientation orientation, int role) {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole || section < 0 || section >= count) return {};
  return QString::fromLatin1(names[section]);
}
bool wanted(int role) { return role == Qt::DisplayRole || role == kRawValueRole || role == Qt::TextAlignmentRole; }

QString kindText(const core::CollectiveSide& side, const core::SideCollective& c) {
  if (c.kind >= 0) return text(std::string(core::collective_kind_name(static_cast<core::CollectiveKind>(c.kind))));
  const std::string& name = side.unmodelled_kinds[c.label];
  return name.empty() ? QStringLiteral("unknown") : text(name);
}

}  // namespace

QString formatSignedPercent(const std::optional<double>& value) {
  if (!value) return QStringLiteral("-");
  return (*value >= 0 ? QStringLiteral("+") : QString()) + formatPercent(value);
}

QString formatPercent(const std::optional<double>& value) {
  return value ? QString::number(100.0 * *value, 'f', 1) + QStringLiteral(" %") : QStringLiteral("-");
}

// ---- MatchedOpsModel ----

MatchedOpsModel::MatchedOpsModel(QObject* parent) : QAbstractTableModel(parent) {}

void MatchedOpsModel::setComparison(std::shared_ptr<const RunComparison> comparison) {
  beginResetModel();
  comparison_ = std::move(comparison);
  order_.clear();
  if (comparison_) {
    const auto& matched = comparison_->result().matched;
    for (std::size_t i = 0; i < matched.size(); ++i) order_.push_back(static_cast<std::int32_t>(i));
    std::stable_sort(order_.begin(), order_.end(), [&](std::int32_t a, std::int32_t b) {
      return std::fabs(matched[a].error().value_or(0)) > std::fabs(matched[b].error().value_or(0));
    });
  }
  endResetModel();
}

const core::MatchedCollective& MatchedOpsModel::pairOfRow(int row) const {
  return comparison_->result().matched[order_.at(static_cast<std::size_t>(row))];
}

int MatchedOpsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(order_.size());
}
int MatchedOpsModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : column_count; }

QVariant MatchedOpsModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() || !wanted(role)) return {};
  const core::MatchedCollective& pair = pairOfRow(index.row());
  const bool raw = role == kRawValueRole;
  const int column = index.column();
  if (role == Qt::TextAlignmentRole) return alignment(column != op && column != measured_op && column != kind);
  const core::SideCollective& p = comparison_->predictedCollective(pair);
  switch (column) {
    case rank:
      return pair.rank;
    case iteration:
      return pair.predicted_iteration;
    case op:
      return text(comparison_->predictedSide().labels[p.label]);
    case measured_op:
      return text(comparison_->measuredSide().labels[comparison_->measuredCollective(pair).label]);
    case kind:
      return kindText(comparison_->predictedSide(), p);
    case bytes:
      return raw ? QVariant(static_cast<qlonglong>(p.bytes)) : QVariant(formatBytes(static_cast<double>(p.bytes)));
    case predicted:
      return raw ? QVariant(pair.predicted_duration) : QVariant(seconds(pair.predicted_duration));
    case measured:
      return raw ? QVariant(pair.measured_duration) : QVariant(seconds(pair.measured_duration));
    case error:
      return raw ? QVariant(pair.error().value_or(0)) : QVariant(formatSignedPercent(pair.error()));
    default:
      return {};
  }
}

QVariant MatchedOpsModel::headerData(int section, Qt::Orientation orientation, int role) const {
  static const char* names[] = {"rank",  "iteration", "predicted op", "measured op", "kind",
                                "bytes", "predicted", "measured",     "error"};
  return header(names, column_count, section, orientation, role);
}

// ---- ErrorSummaryModel ----

ErrorSummaryModel::ErrorSummaryModel(Grouping grouping, QObject* parent)
    : QAbstractTableModel(parent), grouping_(grouping) {}

void ErrorSummaryModel::setComparison(std::shared_ptr<const RunComparison> comparison) {
  beginResetModel();
  comparison_ = std::move(comparison);
  endResetModel();
}

const std::vector<core::ErrorSummary>& ErrorSummaryModel::rows() const {
  static const std::vector<core::ErrorSummary> none;
  if (!comparison_) return none;
  return grouping_ == Grouping::kind_and_size ? comparison_->result().by_kind_size : comparison_->result().by_stream;
}

int ErrorSummaryModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(rows().size());
}
int ErrorSummaryModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : column_count; }

QVariant ErrorSummaryModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() || !wanted(role)) return {};
  const core::ErrorSummary& s = rows()[static_cast<std::size_t>(index.row())];
  const bool raw = role == kRawValueRole;
  if (role == Qt::TextAlignmentRole) return alignment(index.column() != label);
  const double n = std::max(1, s.count);
  switch (index.column()) {
    case label:
      return text(s.label);
    case count:
      return s.count;
    case predicted:
      return raw ? QVariant(s.predicted_total / n) : QVariant(seconds(s.predicted_total / n));
    case measured:
      return raw ? QVariant(s.measured_total / n) : QVariant(seconds(s.measured_total / n));
    case mean_abs:
      return raw ? QVariant(s.mean_abs_error.value_or(0)) : QVariant(formatPercent(s.mean_abs_error));
    case geomean_abs:
      return raw ? QVariant(s.geomean_abs_error.value_or(0)) : QVariant(formatPercent(s.geomean_abs_error));
    default:
      return {};
  }
}

QVariant ErrorSummaryModel::headerData(int section, Qt::Orientation orientation, int role) const {
  static const char* kinds[] = {"kind and size",   "count",        "predicted (mean)",
                                "measured (mean)", "mean |error|", "geomean |error|"};
  static const char* streams[] = {"stream (predicted | measured)",
                                  "count",
                                  "predicted (mean)",
                                  "measured (mean)",
                                  "mean |error|",
                                  "geomean |error|"};
  return header(grouping_ == Grouping::kind_and_size ? kinds : streams, column_count, section, orientation, role);
}

// ---- UnmatchedModel ----

UnmatchedModel::UnmatchedModel(QObject* parent) : QAbstractTableModel(parent) {}

void UnmatchedModel::setComparison(std::shared_ptr<const RunComparison> comparison) {
  beginResetModel();
  comparison_ = std::move(comparison);
  endResetModel();
}

const core::UnmatchedCollective& UnmatchedModel::unmatchedOfRow(int row) const {
  return comparison_->result().unmatched.at(static_cast<std::size_t>(row));
}

int UnmatchedModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() || !comparison_ ? 0 : static_cast<int>(comparison_->result().unmatched.size());
}
int UnmatchedModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : column_count; }

QVariant UnmatchedModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() || !wanted(role)) return {};
  const core::UnmatchedCollective& u = unmatchedOfRow(index.row());
  const core::CollectiveSide& from = u.predicted_side ? comparison_->predictedSide() : comparison_->measuredSide();
  const core::SideCollective& c = comparison_->collectiveOf(u);
  if (role == Qt::TextAlignmentRole)
    return alignment(index.column() == rank || index.column() == iteration || index.column() == bytes);
  switch (index.column()) {
    case side:
      return u.predicted_side ? QStringLiteral("predicted") : QStringLiteral("measured");
    case rank:
      return u.rank;
    case iteration:
      return c.iteration;
    case op:
      return text(from.labels[c.label]);
    case kind:
      return kindText(from, c);
    case bytes:
      return role == kRawValueRole ? QVariant(static_cast<qlonglong>(c.bytes))
                                   : QVariant(c.bytes < 0 ? QStringLiteral("?") : formatBytes(c.bytes));
    case reason:
      return text(u.reason);
    default:
      return {};
  }
}

QVariant UnmatchedModel::headerData(int section, Qt::Orientation orientation, int role) const {
  static const char* names[] = {"side", "rank", "iteration", "op", "kind", "bytes", "reason"};
  return header(names, column_count, section, orientation, role);
}

// ---- CountsDiffModel ----

CountsDiffModel::CountsDiffModel(QObject* parent) : QAbstractTableModel(parent) {}

void CountsDiffModel::setComparison(std::shared_ptr<const RunComparison> comparison) {
  beginResetModel();
  comparison_ = std::move(comparison);
  endResetModel();
}

int CountsDiffModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() || !comparison_ ? 0 : static_cast<int>(comparison_->counts().size());
}
int CountsDiffModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : column_count; }

QVariant CountsDiffModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() || !wanted(role)) return {};
  const core::CountDifference& d = comparison_->counts()[static_cast<std::size_t>(index.row())];
  if (role == Qt::TextAlignmentRole) return alignment(index.column() == predicted || index.column() == measured);
  switch (index.column()) {
    case comm_key:
      return text(d.comm_key);
    case group:
      return text(d.group);
    case predicted:
      return d.predicted;
    case measured:
      return d.measured;
    case change:
      return text(d.change);
    default:
      return {};
  }
}

QVariant CountsDiffModel::headerData(int section, Qt::Orientation orientation, int role) const {
  static const char* names[] = {"op (CommDebugMode)", "group", "predicted", "measured", "change"};
  return header(names, column_count, section, orientation, role);
}

// ---- RangeDeltaModel ----

RangeDeltaModel::RangeDeltaModel(QObject* parent) : QAbstractTableModel(parent) {}

void RangeDeltaModel::setComparison(std::shared_ptr<const RunComparison> comparison) {
  comparison_ = std::move(comparison);
  setRange(0, comparison_ ? comparison_->predictedStore()->makespan() : 0, 0);
}

void RangeDeltaModel::setRange(double begin, double end, double offset) {
  beginResetModel();
  begin_ = begin;
  end_ = end;
  predicted_.reset();
  measured_.reset();
  if (comparison_ && end > begin) {
    const auto first = [](const TimelineStore& store, double b, double e) -> std::optional<core::RankStats> {
      const auto stats = core::analyse_window(store.program(), store.result(), b, e);
      if (stats.empty()) return std::nullopt;
      return stats.front();
    };
    predicted_ = first(*comparison_->predictedStore(), begin, end);
    measured_ = first(*comparison_->measuredStore(), begin + offset, end + offset);
  }
  endResetModel();
}

double RangeDeltaModel::value(int row, bool measured) const {
  const std::optional<core::RankStats>& s = measured ? measured_ : predicted_;
  if (!s) return 0;
  switch (row) {
    case duration:
      return end_ - begin_;
    case compute:
      return s->compute;
    case communication:
      return s->communication;
    case exposed:
      return s->exposed_communication;
    case overlap:
      return s->overlap;
    case idle:
      return s->idle;
    case wait:
      return s->wait_at_collective;
    default:
      return 0;
  }
}

int RangeDeltaModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() || !predicted_ || !measured_ ? 0 : row_count;
}
int RangeDeltaModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : column_count; }

QVariant RangeDeltaModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() || !wanted(role)) return {};
  if (role == Qt::TextAlignmentRole) return alignment(index.column() != figure);
  static const char* figures[] = {"range",   "compute", "communication",      "exposed communication",
                                  "overlap", "idle",    "wait at collectives"};
  const int row = index.row();
  const double p = value(row, false), m = value(row, true);
  const bool fraction = row == overlap;
  const auto shown = [&](double v) { return fraction ? formatPercent(v) : seconds(v); };
  switch (index.column()) {
    case figure:
      return QString::fromLatin1(figures[row]);
    case predicted:
      return role == kRawValueRole ? QVariant(p) : QVariant(shown(p));
    case measured:
      return role == kRawValueRole ? QVariant(m) : QVariant(shown(m));
    case delta: {
      const double d = m - p;
      if (role == kRawValueRole) return d;
      return (d >= 0 ? QStringLiteral("+") : QString()) +
             (fraction ? QString::number(100.0 * d, 'f', 1) + QStringLiteral(" pt") : seconds(d));
    }
    default:
      return {};
  }
}

QVariant RangeDeltaModel::headerData(int section, Qt::Orientation orientation, int role) const {
  static const char* names[] = {"figure (first recorded rank)", "predicted", "measured", "measured - predicted"};
  return header(names, column_count, section, orientation, role);
}

}  // namespace stratsim::gui
