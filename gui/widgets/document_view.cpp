#include "widgets/document_view.hpp"

#include <QHeaderView>
#include <QLabel>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTabWidget>
#include <QTableView>
#include <QVBoxLayout>

#include "model/table_models.hpp"
#include "widgets/panels.hpp"
#include "widgets/timeline_view.hpp"
#include "widgets/what_if_widgets.hpp"

namespace stratsim::gui {
namespace {

QTableView* table(QAbstractItemModel* model, QWidget* parent, bool sortable) {
  auto* view = new QTableView(parent);
  if (sortable) {
    auto* proxy = new QSortFilterProxyModel(view);
    proxy->setSourceModel(model);
    proxy->setSortRole(kRawValueRole);
    view->setModel(proxy);
    view->setSortingEnabled(true);
  } else {
    view->setModel(model);
  }
  view->setSelectionBehavior(QAbstractItemView::SelectRows);
  view->verticalHeader()->hide();
  view->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  view->horizontalHeader()->setStretchLastSection(true);
  return view;
}

}  // namespace

DocumentView::DocumentView(std::shared_ptr<LoadedDocument> document, QWidget* parent)
    : QWidget(parent), document_(std::move(document)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  splitter_ = new QSplitter(Qt::Vertical, this);
  splitter_->setObjectName(QStringLiteral("documentSplitter"));
  layout->addWidget(splitter_);
  panels_ = new QTabWidget(splitter_);
  panels_->setObjectName(QStringLiteral("panels"));
  if (document_->store) buildTimeline();
  if (document_->summary) {
    summary_ = new SummaryCharts(panels_);
    summary_->setSummary(*document_->summary);
    panels_->addTab(summary_, QStringLiteral("Summary"));
  }
  if (!document_->store) splitter_->addWidget(panels_);
}

void DocumentView::buildTimeline() {
  auto* top = new QWidget(splitter_);
  auto* column = new QVBoxLayout(top);
  column->setContentsMargins(0, 0, 0, 0);
  column->setSpacing(0);
  find_ = new FindBar(top);
  timeline_ = new TimelineView(top);
  column->addWidget(find_);
  column->addWidget(timeline_, 1);
  splitter_->addWidget(top);
  splitter_->addWidget(panels_);
  splitter_->setStretchFactor(0, 3);
  splitter_->setStretchFactor(1, 1);

  const auto& store = document_->store;
  details_ = new DetailsPanel(panels_);
  range_model_ = new RangeStatsModel(this);
  counts_model_ = new CountsModel(this);
  collectives_model_ = new CollectivesModel(this);
  range_model_->setStore(store);
  counts_model_->setProgram(&store->program());
  collectives_model_->setStore(store);
  range_table_ = table(range_model_, panels_, false);
  counts_table_ = table(counts_model_, panels_, true);
  counts_proxy_ = static_cast<QSortFilterProxyModel*>(counts_table_->model());
  panels_->addTab(details_, QStringLiteral("Details"));
  panels_->addTab(range_table_, QStringLiteral("Range statistics"));
  panels_->addTab(counts_table_, QStringLiteral("Collective counts"));
  panels_->addTab(table(collectives_model_, panels_, true), QStringLiteral("Collectives"));

  timeline_->setStore(store);
  details_->setStore(store);
  find_->setStore(store);
  connect(timeline_, &TimelineView::opSelected, details_, &DetailsPanel::showOp);
  connect(timeline_, &TimelineView::opSelected, this, [this](OpRef op) {
    if (op.valid()) panels_->setCurrentWidget(details_);
  });
  connect(details_, &DetailsPanel::opActivated, timeline_, &TimelineView::selectOp);
  connect(timeline_, &TimelineView::rangeSelected, this, [this](double start, double end) {
    range_model_->setRange(std::make_pair(start, end));
    panels_->setCurrentWidget(range_table_);
  });
  connect(timeline_, &TimelineView::rangeCleared, this, [this] { range_model_->setRange(std::nullopt); });
  connect(timeline_, &TimelineView::findRequested, find_, &FindBar::activate);
  connect(find_, &FindBar::matchesChanged, timeline_, &TimelineView::setHighlightedOps);
  connect(find_, &FindBar::matchSelected, timeline_, &TimelineView::selectOp);
  connect(counts_table_->selectionModel(), &QItemSelectionModel::selectionChanged, this,
          &DocumentView::highlightCountsSelection);
}

void DocumentView::setWhatIf(const WhatIfInputs& inputs) {
  if (plan_panel_) return;
  plan_panel_ = new PlanPanel(inputs, panels_);
  panels_->insertTab(0, plan_panel_, QStringLiteral("Plan"));
  panels_->setCurrentWidget(plan_panel_);
}

// A counts row stands for program ops; highlight them on every recorded rank.
void DocumentView::highlightCountsSelection() {
  std::vector<OpRef> ops;
  const int ranks = document_->store->recordedRanks();
  for (const QModelIndex& index : counts_table_->selectionModel()->selectedRows()) {
    const int row = counts_proxy_->mapToSource(index).row();
    for (int s = 0; s < ranks; ++s)
      for (int op : counts_model_->opsOfRow(row)) ops.push_back({s, op});
  }
  timeline_->setHighlightedOps(std::move(ops));
}

}  // namespace stratsim::gui
