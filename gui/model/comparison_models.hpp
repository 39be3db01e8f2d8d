// The side-by-side view's tables as Qt item models over a RunComparison (no widgets; tested with
// QAbstractItemModelTester): matched collectives with their two durations and signed error,
// error summaries (per kind x size, per stream), unmatched collectives with their reasons,
// CommDebugMode counts diffed, and range statistics of both runs with their deltas. The figures
// are core's; these classes lay them out. Qt::UserRole (kRawValueRole) gives raw values for sorting.
#pragma once

#include <QAbstractTableModel>

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "model/run_comparison.hpp"
#include "model/table_models.hpp"

namespace stratsim::gui {

// "12.3 %" and "+12.3 %" (signed), "-" when there is no value: how the comparison shows errors.
QString formatPercent(const std::optional<double>& value);
QString formatSignedPercent(const std::optional<double>& value);

// One row per matched collective, largest |error| first.
class MatchedOpsModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { rank, iteration, op, measured_op, kind, bytes, predicted, measured, error, column_count };
  explicit MatchedOpsModel(QObject* parent = nullptr);
  void setComparison(std::shared_ptr<const RunComparison> comparison);
  // The matched pair a row shows.
  const core::MatchedCollective& pairOfRow(int row) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  std::shared_ptr<const RunComparison> comparison_;
  std::vector<std::int32_t> order_;  // rows -> matched index, by |error| descending
};

// Error summaries: per collective kind x size bucket, or per stream pair.
class ErrorSummaryModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { label, count, predicted, measured, mean_abs, geomean_abs, column_count };
  enum class Grouping { kind_and_size, stream };
  ErrorSummaryModel(Grouping grouping, QObject* parent = nullptr);
  void setComparison(std::shared_ptr<const RunComparison> comparison);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  const std::vector<core::ErrorSummary>& rows() const;
  Grouping grouping_;
  std::shared_ptr<const RunComparison> comparison_;
};

class UnmatchedModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { side, rank, iteration, op, kind, bytes, reason, column_count };
  explicit UnmatchedModel(QObject* parent = nullptr);
  void setComparison(std::shared_ptr<const RunComparison> comparison);
  const core::UnmatchedCollective& unmatchedOfRow(int row) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  std::shared_ptr<const RunComparison> comparison_;
};

// CommDebugMode counts per key and group: predicted, measured, and the change.
class CountsDiffModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { comm_key, group, predicted, measured, change, column_count };
  explicit CountsDiffModel(QObject* parent = nullptr);
  void setComparison(std::shared_ptr<const RunComparison> comparison);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  std::shared_ptr<const RunComparison> comparison_;
};

// Range statistics (core::analyse_window, first recorded rank) of both runs over one range, the
// measured run's shifted by the panes' offset: one row per figure, predicted, measured, delta.
class RangeDeltaModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { figure, predicted, measured, delta, column_count };
  enum Row { duration, compute, communication, exposed, overlap, idle, wait, row_count };
  explicit RangeDeltaModel(QObject* parent = nullptr);
  void setComparison(std::shared_ptr<const RunComparison> comparison);
  // [begin, end) on the predicted run's clock; the measured run's is [begin, end) + offset.
  void setRange(double begin, double end, double offset);
  double value(int row, bool measured) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  std::shared_ptr<const RunComparison> comparison_;
  double begin_ = 0, end_ = 0;
  std::optional<core::RankStats> predicted_, measured_;
};

}  // namespace stratsim::gui
