// The viewer's tables as Qt item models over core's figures (no widgets; tested with
// QAbstractItemModelTester): CommDebugMode counts, the HTA breakdown of a time range, and the
// collectives of the run. Numbers come from core (collective_counts, analyse_window, analyse);
// these classes only lay them out. Qt::UserRole gives each cell's raw value for sorting.
#pragma once

#include <QAbstractTableModel>

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "model/timeline_store.hpp"
#include "stratsim/core/collective_counts.hpp"

namespace stratsim::gui {

inline constexpr int kRawValueRole = Qt::UserRole;

// CommDebugMode counts per iteration, phase, module and process group, with bytes.
class CountsModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { iteration, comm_key, kind, phase, module, group, count, bytes, column_count };
  explicit CountsModel(QObject* parent = nullptr);
  void setProgram(const core::Program* program);  // nullptr clears; the program must outlive the model
  const std::vector<core::CollectiveCount>& rows() const { return rows_; }
  // The program ops a row counts.
  const std::vector<int>& opsOfRow(int row) const { return rows_.at(static_cast<std::size_t>(row)).ops; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  std::vector<core::CollectiveCount> rows_;
};

// Per recorded rank, HTA's breakdown over a time range (core::analyse_window), then each
// stream's busy time.
class RangeStatsModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { ranks, compute, communication, overlap, exposed, idle, wait, first_stream };
  explicit RangeStatsModel(QObject* parent = nullptr);
  void setStore(std::shared_ptr<const TimelineStore> store);
  // The range shown; std::nullopt: the whole run [0, makespan].
  void setRange(std::optional<std::pair<double, double>> range);
  std::pair<double, double> range() const { return {begin_, end_}; }
  const std::vector<core::RankStats>& stats() const { return stats_; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  void recompute();
  std::shared_ptr<const TimelineStore> store_;
  double begin_ = 0, end_ = 0;
  std::vector<core::RankStats> stats_;
};

// Every collective group instance: name, kind, group, instance, algorithm, bytes, duration, busbw.
class CollectivesModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { name, kind, group, instance, algorithm, size, bytes, start, duration, algbw, busbw, column_count };
  explicit CollectivesModel(QObject* parent = nullptr);
  void setStore(std::shared_ptr<const TimelineStore> store);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  std::shared_ptr<const TimelineStore> store_;
};

// "16.01 MB" style sizes for the tables.
QString formatBytes(double bytes);

}  // namespace stratsim::gui
