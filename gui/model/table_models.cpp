#include "model/table_models.hpp"

#include <cmath>

#include "model/viewport.hpp"

namespace stratsim::gui {
namespace {

QString text(const std::string& value) { return QString::fromStdString(value); }
QString percent(double fraction) { return QString::number(100.0 * fraction, 'f', 1) + QStringLiteral(" %"); }

}  // namespace

QString formatBytes(double bytes) {
  const double magnitude = std::fabs(bytes);
  if (magnitude >= 1e9) return QString::number(bytes / 1e9, 'f', 2) + QStringLiteral(" GB");
  if (magnitude >= 1e6) return QString::number(bytes / 1e6, 'f', 2) + QStringLiteral(" MB");
  if (magnitude >= 1e3) return QString::number(bytes / 1e3, 'f', 2) + QStringLiteral(" kB");
  return QString::number(bytes, 'f', 0) + QStringLiteral(" B");
}

// ---- CountsModel ----

CountsModel::CountsModel(QObject* parent) : QAbstractTableModel(parent) {}

void CountsModel::setProgram(const core::Program* program) {
  beginResetModel();
  rows_ = program ? core::collective_counts(*program) : std::vector<core::CollectiveCount>{};
  endResetModel();
}

int CountsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(rows_.size());
}
int CountsModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : column_count; }

QVariant CountsModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() ||
      (role != Qt::DisplayRole && role != kRawValueRole && role != Qt::TextAlignmentRole))
    return {};
  const core::CollectiveCount& row = rows_[static_cast<std::size_t>(index.row())];
  const bool numeric = index.column() == iteration || index.column() == count || index.column() == bytes;
  if (role == Qt::TextAlignmentRole)
    return QVariant::fromValue(numeric ? Qt::AlignRight | Qt::AlignVCenter : Qt::AlignLeft | Qt::AlignVCenter);
  switch (index.column()) {
    case iteration:
      return row.iteration;
    case comm_key:
      return text(row.comm_key);
    case kind:
      return text(std::string(core::collective_kind_name(row.kind)));
    case phase:
      return text(std::string(core::phase_name(row.phase)));
    case module:
      return row.module.empty() ? QStringLiteral("<root>") : text(row.module);
    case group:
      return text(row.group);
    case count:
      return row.count;
    case bytes:
      return role == kRawValueRole ? QVariant(static_cast<qlonglong>(row.bytes)) : QVariant(formatBytes(row.bytes));
    default:
      return {};
  }
}

QVariant CountsModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* names[] = {"iteration", "op (CommDebugMode)", "kind", "phase", "module", "group", "count",
                                "bytes"};
  return section >= 0 && section < column_count ? QVariant(QString::fromLatin1(names[section])) : QVariant();
}

// ---- RangeStatsModel ----

RangeStatsModel::RangeStatsModel(QObject* parent) : QAbstractTableModel(parent) {}

void RangeStatsModel::setStore(std::shared_ptr<const TimelineStore> store) {
  store_ = std::move(store);
  begin_ = 0;
  end_ = store_ ? store_->makespan() : 0;
  recompute();
}

void RangeStatsModel::setRange(std::optional<std::pair<double, double>> range) {
  if (range) {
    begin_ = std::min(range->first, range->second);
    end_ = std::max(range->first, range->second);
  } else {
    begin_ = 0;
    end_ = store_ ? store_->makespan() : 0;
  }
  recompute();
}

void RangeStatsModel::recompute() {
  beginResetModel();
  stats_ =
      store_ ? core::analyse_window(store_->program(), store_->result(), begin_, end_) : std::vector<core::RankStats>{};
  endResetModel();
}

int RangeStatsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(stats_.size());
}
int RangeStatsModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() || !store_ ? 0 : first_stream + store_->streams();
}

QVariant RangeStatsModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() || index.column() >= columnCount()) return {};
  if (role == Qt::TextAlignmentRole)
    return QVariant::fromValue(index.column() == ranks ? Qt::AlignLeft | Qt::AlignVCenter
                                                       : Qt::AlignRight | Qt::AlignVCenter);
  if (role != Qt::DisplayRole && role != kRawValueRole) return {};
  const core::RankStats& s = stats_[static_cast<std::size_t>(index.row())];
  const bool raw = role == kRawValueRole;
  const auto seconds = [&](double value) { return raw ? QVariant(value) : QVariant(formatTime(value)); };
  switch (index.column()) {
    case ranks:
      return store_->rankLabel(index.row());
    case compute:
      return seconds(s.compute);
    case communication:
      return seconds(s.communication);
    case overlap:
      return raw ? QVariant(s.overlap) : QVariant(percent(s.overlap));
    case exposed:
      return seconds(s.exposed_communication);
    case idle:
      return seconds(s.idle);
    case wait:
      return seconds(s.wait_at_collective);
    default:
      return seconds(s.streams.at(static_cast<std::size_t>(index.column() - first_stream)).busy);
  }
}

QVariant RangeStatsModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* names[] = {"ranks", "compute", "communication", "overlap", "exposed comm", "idle", "wait"};
  if (section >= 0 && section < first_stream) return QString::fromLatin1(names[section]);
  if (store_ && section >= first_stream && section < columnCount())
    return QStringLiteral("busy: %1").arg(text(store_->program().streams[section - first_stream]));
  return {};
}

// ---- CollectivesModel ----

CollectivesModel::CollectivesModel(QObject* parent) : QAbstractTableModel(parent) {}

void CollectivesModel::setStore(std::shared_ptr<const TimelineStore> store) {
  beginResetModel();
  store_ = std::move(store);
  endResetModel();
}

int CollectivesModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() || !store_ ? 0 : static_cast<int>(store_->analysis().collectives.size());
}
int CollectivesModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : column_count; }

QVariant CollectivesModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount()) return {};
  if (role == Qt::TextAlignmentRole)
    return QVariant::fromValue(index.column() <= algorithm && index.column() != instance
                                   ? Qt::AlignLeft | Qt::AlignVCenter
                                   : Qt::AlignRight | Qt::AlignVCenter);
  if (role != Qt::DisplayRole && role != kRawValueRole) return {};
  const core::CollectiveStats& c = store_->analysis().collectives[static_cast<std::size_t>(index.row())];
  const bool raw = role == kRawValueRole;
  const auto bandwidth = [&](double bytes_per_second) {
    return raw ? QVariant(bytes_per_second) : QVariant(QString::number(bytes_per_second / 1e9, 'f', 2) + " GB/s");
  };
  switch (index.column()) {
    case name:
      return text(c.name);
    case kind:
      return text(std::string(core::collective_kind_name(c.kind)));
    case group:
      return text(c.group);
    case instance:
      return c.instance;
    case algorithm:
      return text(c.algorithm);
    case size:
      return c.group_size;
    case bytes:
      return raw ? QVariant(c.bytes) : QVariant(formatBytes(c.bytes));
    case start:
      return raw ? QVariant(c.start) : QVariant(formatTime(c.start));
    case duration:
      return raw ? QVariant(c.duration) : QVariant(formatTime(c.duration));
    case algbw:
      return bandwidth(c.algbw);
    case busbw:
      return bandwidth(c.busbw);
    default:
      return {};
  }
}

QVariant CollectivesModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* names[] = {"collective", "kind",  "group",    "instance", "algorithm", "ranks",
                                "bytes",      "start", "duration", "algbw",    "busbw"};
  return section >= 0 && section < column_count ? QVariant(QString::fromLatin1(names[section])) : QVariant();
}

}  // namespace stratsim::gui
