// Two runs side by side (a tab): the prediction above the measurement, zoom and pan locked
// between the panes (a toggle) with an offset, auto-alignment on an iteration's start, a ghost mode
// that outlines the measured run's ops over the predicted lanes, and below the panes the matched
// collectives (largest |error| first; a click jumps both panes to the pair and lines it up), the
// error summaries per kind x size and per stream, the unmatched collectives with their reasons,
// CommDebugMode counts diffed, and range statistics of both runs with their deltas. The matching
// is core's (model/run_comparison.hpp), the same as `stratsim compare`.
#pragma once

#include <QWidget>

#include <memory>

#include "model/run_comparison.hpp"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QPushButton;
class QSortFilterProxyModel;
class QSplitter;
class QTabWidget;
class QTableView;

namespace stratsim::gui {

class TimelineView;
class MatchedOpsModel;
class ErrorSummaryModel;
class UnmatchedModel;
class CountsDiffModel;
class RangeDeltaModel;

class ComparisonView : public QWidget {
  Q_OBJECT
 public:
  // `roles` name the two panes ("predicted"/"measured"; "before"/"after" for a what-if re-run).
  explicit ComparisonView(std::shared_ptr<const RunComparison> comparison, QWidget* parent = nullptr,
                          std::pair<QString, QString> roles = {QStringLiteral("predicted"),
                                                               QStringLiteral("measured")});

  const RunComparison& comparison() const { return *comparison_; }
  TimelineView* predictedView() const { return predicted_; }
  TimelineView* measuredView() const { return measured_; }
  QCheckBox* lockBox() const { return lock_; }
  QDoubleSpinBox* offsetBox() const { return offset_box_; }  // milliseconds
  QComboBox* iterationBox() const { return iteration_box_; }
  QPushButton* alignButton() const { return align_; }
  QCheckBox* ghostBox() const { return ghost_; }
  QTabWidget* panels() const { return panels_; }
  QTableView* matchedTable() const { return matched_table_; }
  QTableView* unmatchedTable() const { return unmatched_table_; }
  QTableView* countsTable() const { return counts_table_; }
  QTableView* rangeTable() const { return range_table_; }
  MatchedOpsModel* matchedModel() const { return matched_model_; }
  RangeDeltaModel* rangeModel() const { return range_model_; }
  QSplitter* splitter() const { return splitter_; }

  double offset() const { return offset_; }  // measured time - predicted time, seconds
  void setOffset(double seconds);
  void alignOnIteration(int pair);  // an index into comparison().result().iterations
  // Both panes on the pair's ops, lined up (the offset becomes their start difference), selected.
  void jumpToPair(const core::MatchedCollective& pair);

 private:
  QWidget* buildControls();
  QWidget* pane(const QString& title, TimelineView* view);
  void buildPanels();
  void follow(TimelineView* from, double start, double end);
  void updateGhost();
  void rangeSelectedOn(bool predicted_pane, double start, double end);

  std::shared_ptr<const RunComparison> comparison_;
  TimelineView* predicted_ = nullptr;
  TimelineView* measured_ = nullptr;
  QCheckBox* lock_ = nullptr;
  QDoubleSpinBox* offset_box_ = nullptr;
  QComboBox* iteration_box_ = nullptr;
  QPushButton* align_ = nullptr;
  QCheckBox* ghost_ = nullptr;
  QSplitter* splitter_ = nullptr;
  QTabWidget* panels_ = nullptr;
  QTableView* matched_table_ = nullptr;
  QTableView* unmatched_table_ = nullptr;
  QTableView* counts_table_ = nullptr;
  QTableView* range_table_ = nullptr;
  QSortFilterProxyModel* matched_proxy_ = nullptr;
  MatchedOpsModel* matched_model_ = nullptr;
  ErrorSummaryModel* kind_model_ = nullptr;
  ErrorSummaryModel* stream_model_ = nullptr;
  UnmatchedModel* unmatched_model_ = nullptr;
  CountsDiffModel* counts_model_ = nullptr;
  RangeDeltaModel* range_model_ = nullptr;
  double offset_ = 0;
  bool syncing_ = false;
  bool selecting_range_ = false;
};

}  // namespace stratsim::gui
