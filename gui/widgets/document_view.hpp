// One open document (a tab): the timeline with its find bar above the panels (Details, Range
// statistics, Collective counts, Collectives, Summary), wired together: a click selects an op and
// shows its details, a details link jumps, a range selection recomputes the range statistics, a
// counts row highlights its ops. A run report has no timeline and shows the Summary only.
#pragma once

#include <QWidget>

#include <memory>

#include "model/document_loader.hpp"
#include "model/what_if.hpp"

class QSplitter;
class QTabWidget;
class QTableView;
class QSortFilterProxyModel;

namespace stratsim::gui {

class TimelineView;
class DetailsPanel;
class FindBar;
class SummaryCharts;
class CountsModel;
class RangeStatsModel;
class CollectivesModel;
class PlanPanel;

class DocumentView : public QWidget {
  Q_OBJECT
 public:
  explicit DocumentView(std::shared_ptr<LoadedDocument> document, QWidget* parent = nullptr);

  const LoadedDocument& document() const { return *document_; }
  std::shared_ptr<const LoadedDocument> sharedDocument() const { return document_; }
  TimelineView* timeline() const { return timeline_; }  // nullptr for a run report
  DetailsPanel* details() const { return details_; }
  FindBar* findBar() const { return find_; }
  QTabWidget* panels() const { return panels_; }
  QSplitter* splitter() const { return splitter_; }
  QTableView* countsTable() const { return counts_table_; }
  QTableView* rangeTable() const { return range_table_; }
  RangeStatsModel* rangeModel() const { return range_model_; }
  CountsModel* countsModel() const { return counts_model_; }
  SummaryCharts* summary() const { return summary_; }
  // A document made by a what-if run: its inputs in an editable Plan panel (Re-run, Run for real).
  void setWhatIf(const WhatIfInputs& inputs);
  PlanPanel* planPanel() const { return plan_panel_; }

 private:
  void buildTimeline();
  void highlightCountsSelection();

  std::shared_ptr<LoadedDocument> document_;
  QSplitter* splitter_ = nullptr;
  QTabWidget* panels_ = nullptr;
  TimelineView* timeline_ = nullptr;
  FindBar* find_ = nullptr;
  DetailsPanel* details_ = nullptr;
  SummaryCharts* summary_ = nullptr;
  CountsModel* counts_model_ = nullptr;
  RangeStatsModel* range_model_ = nullptr;
  CollectivesModel* collectives_model_ = nullptr;
  QTableView* counts_table_ = nullptr;
  QTableView* range_table_ = nullptr;
  QSortFilterProxyModel* counts_proxy_ = nullptr;
  PlanPanel* plan_panel_ = nullptr;
};

}  // namespace stratsim::gui
