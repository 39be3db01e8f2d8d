#include "widgets/comparison_view.hpp"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QScopedValueRollback>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTabWidget>
#include <QTableView>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

#include "model/comparison_models.hpp"
#include "widgets/timeline_view.hpp"

namespace stratsim::gui {
namespace {

QTableView* table(QAbstractItemModel* model, QWidget* parent, QSortFilterProxyModel** proxy_out = nullptr) {
  auto* view = new QTableView(parent);
  auto* proxy = new QSortFilterProxyModel(view);
  proxy->setSourceModel(model);
  proxy->setSortRole(kRawValueRole);
  view->setModel(proxy);
  view->setSortingEnabled(true);
  view->sortByColumn(-1, Qt::AscendingOrder);  // the model's own order until a header is clicked
  view->setSelectionBehavior(QAbstractItemView::SelectRows);
  view->setSelectionMode(QAbstractItemView::SingleSelection);
  view->verticalHeader()->hide();
  view->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  view->horizontalHeader()->setStretchLastSection(true);
  if (proxy_out) *proxy_out = proxy;
  return view;
}

}  // namespace

ComparisonView::ComparisonView(std::shared_ptr<const RunComparison> comparison, QWidget* parent,
                               std::pair<QString, QString> roles)
    : QWidget(parent), comparison_(std::move(comparison)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(0);
  layout->addWidget(buildControls());
  splitter_ = new QSplitter(Qt::Vertical, this);
  splitter_->setObjectName(QStringLiteral("comparisonSplitter"));
  layout->addWidget(splitter_, 1);
  predicted_ = new TimelineView;
  measured_ = new TimelineView;
  splitter_->addWidget(pane(QStringLiteral("%1: %2").arg(roles.first, comparison_->predicted().path), predicted_));
  splitter_->addWidget(pane(QStringLiteral("%1: %2").arg(roles.second, comparison_->measured().path), measured_));
  predicted_->setStore(comparison_->predictedStore());
  measured_->setStore(comparison_->measuredStore());
  buildPanels();
  splitter_->setStretchFactor(0, 2);
  splitter_->setStretchFactor(1, 2);
  splitter_->setStretchFactor(2, 1);

  connect(predicted_, &TimelineView::visibleRangeChanged, this,
          [this](double start, double end) { follow(predicted_, start, end); });
  connect(measured_, &TimelineView::visibleRangeChanged, this,
          [this](double start, double end) { follow(measured_, start, end); });
  connect(predicted_, &TimelineView::rangeSelected, this,
          [this](double start, double end) { rangeSelectedOn(true, start, end); });
  connect(measured_, &TimelineView::rangeSelected, this,
          [this](double start, double end) { rangeSelectedOn(false, start, end); });
  if (!comparison_->result().iterations.empty()) alignOnIteration(0);
}

QWidget* ComparisonView::buildControls() {
  auto* bar = new QWidget(this);
  auto* row = new QHBoxLayout(bar);
  row->setContentsMargins(6, 3, 6, 3);
  const core::OpComparison& r = comparison_->result();
  auto* summary =
      new QLabel(QStringLiteral("%1 of %2 predicted and %3 measured collectives matched · mean |error| "
                                "%4 · geomean |error| %5")
                     .arg(r.matched.size())
                     .arg(r.predicted_compared)
                     .arg(r.measured_compared)
                     .arg(formatPercent(r.overall.mean_abs_error), formatPercent(r.overall.geomean_abs_error)),
                 bar);
  summary->setObjectName(QStringLiteral("comparisonSummary"));
  summary->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);  // shrinks, the controls stay whole
  summary->setMinimumWidth(120);
  summary->setToolTip(QString::fromStdString("iterations paired " + r.alignment));
  lock_ = new QCheckBox(QStringLiteral("Lock zoom and pan"), bar);
  lock_->setChecked(true);
  offset_box_ = new QDoubleSpinBox(bar);
  offset_box_->setDecimals(3);
  offset_box_->setRange(-1e9, 1e9);
  offset_box_->setSuffix(QStringLiteral(" ms"));
  offset_box_->setToolTip(QStringLiteral("Measured time minus predicted time at the same place in both panes"));
  iteration_box_ = new QComboBox(bar);
  for (const auto& [p, m] : r.iterations)
    iteration_box_->addItem(p == m ? QStringLiteral("iteration %1").arg(p)
                                   : QStringLiteral("iteration %1 ↔ measured %2").arg(p).arg(m));
  align_ = new QPushButton(QStringLiteral("Align"), bar);
  align_->setToolTip(QStringLiteral("Offset the panes so that the chosen iteration starts at the same place"));
  align_->setEnabled(iteration_box_->count() > 0);
  ghost_ = new QCheckBox(QStringLiteral("Ghost"), bar);
  ghost_->setToolTip(QStringLiteral("Outline the measured run's ops over the predicted lanes"));
  row->addWidget(summary, 1);
  row->addWidget(lock_);
  row->addWidget(new QLabel(QStringLiteral("Offset"), bar));
  row->addWidget(offset_box_);
  row->addWidget(iteration_box_);
  row->addWidget(align_);
  row->addWidget(ghost_);
  connect(offset_box_, &QDoubleSpinBox::valueChanged, this, [this](double ms) {
    if (std::fabs(ms / 1e3 - offset_) > 5e-7) setOffset(ms / 1e3);
  });
  connect(align_, &QPushButton::clicked, this, [this] { alignOnIteration(iteration_box_->currentIndex()); });
  connect(ghost_, &QCheckBox::toggled, this, &ComparisonView::updateGhost);
  connect(lock_, &QCheckBox::toggled, this, [this](bool locked) {
    if (locked) follow(predicted_, predicted_->visibleStart(), predicted_->visibleEnd());
  });
  return bar;
}

QWidget* ComparisonView::pane(const QString& title, TimelineView* view) {
  auto* box = new QWidget;
  auto* column = new QVBoxLayout(box);
  column->setContentsMargins(0, 0, 0, 0);
  column->setSpacing(0);
  auto* label = new QLabel(title, box);
  label->setContentsMargins(6, 2, 6, 2);
  column->addWidget(label);
  view->setParent(box);
  column->addWidget(view, 1);
  return box;
}

void ComparisonView::buildPanels() {
  panels_ = new QTabWidget(splitter_);
  panels_->setObjectName(QStringLiteral("comparisonPanels"));
  matched_model_ = new MatchedOpsModel(this);
  kind_model_ = new ErrorSummaryModel(ErrorSummaryModel::Grouping::kind_and_size, this);
  stream_model_ = new ErrorSummaryModel(ErrorSummaryModel::Grouping::stream, this);
  unmatched_model_ = new UnmatchedModel(this);
  counts_model_ = new CountsDiffModel(this);
  range_model_ = new RangeDeltaModel(this);
  matched_model_->setComparison(comparison_);
  kind_model_->setComparison(comparison_);
  stream_model_->setComparison(comparison_);
  unmatched_model_->setComparison(comparison_);
  counts_model_->setComparison(comparison_);
  range_model_->setComparison(comparison_);
  matched_table_ = table(matched_model_, panels_, &matched_proxy_);
  unmatched_table_ = table(unmatched_model_, panels_);
  counts_table_ = table(counts_model_, panels_);
  range_table_ = table(range_model_, panels_);
  panels_->addTab(matched_table_, QStringLiteral("Matched collectives"));
  panels_->addTab(table(kind_model_, panels_), QStringLiteral("By kind and size"));
  panels_->addTab(table(stream_model_, panels_), QStringLiteral("By stream"));
  panels_->addTab(unmatched_table_, QStringLiteral("Unmatched (%1)").arg(comparison_->result().unmatched.size()));
  panels_->addTab(counts_table_, QStringLiteral("Counts"));
  panels_->addTab(range_table_, QStringLiteral("Range statistics"));
  splitter_->addWidget(panels_);

  connect(matched_table_->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
          [this](const QModelIndex& current) {
            if (current.isValid()) jumpToPair(matched_model_->pairOfRow(matched_proxy_->mapToSource(current).row()));
          });
  auto* unmatched_proxy = static_cast<QSortFilterProxyModel*>(unmatched_table_->model());
  connect(unmatched_table_->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
          [this, unmatched_proxy](const QModelIndex& current) {
            if (!current.isValid()) return;
            const core::UnmatchedCollective& u =
                unmatched_model_->unmatchedOfRow(unmatched_proxy->mapToSource(current).row());
            const OpRef op = comparison_->opOf(u);
            if (op.valid()) (u.predicted_side ? predicted_ : measured_)->selectOp(op);
          });
}

void ComparisonView::follow(TimelineView* from, double start, double end) {
  if (syncing_ || !lock_->isChecked()) return;
  syncing_ = true;
  if (from == predicted_) measured_->setVisibleRange(start + offset_, end + offset_);
  else predicted_->setVisibleRange(start - offset_, end - offset_);
  syncing_ = false;
}

void ComparisonView::setOffset(double seconds) {
  offset_ = seconds;
  // Each pane may go as far as the other run reaches on its clock, so locked panes stay locked.
  // Both extents change before either pane follows the other (one at a time would clamp a pane
  // to the other's old extent and write that back).
  const double a = predicted_->store()->makespan(), b = measured_->store()->makespan();
  {
    const QScopedValueRollback<bool> guard(syncing_, true);
    predicted_->setTimeExtent(std::make_pair(std::min(0.0, -offset_), std::max(a, b - offset_)));
    measured_->setTimeExtent(std::make_pair(std::min(0.0, offset_), std::max(b, a + offset_)));
  }
  {
    const QSignalBlocker block(offset_box_);
    offset_box_->setValue(seconds * 1e3);
  }
  follow(predicted_, predicted_->visibleStart(), predicted_->visibleEnd());
  updateGhost();
}

void ComparisonView::alignOnIteration(int pair) {
  if (pair < 0 || static_cast<std::size_t>(pair) >= comparison_->result().iterations.size()) return;
  {
    const QSignalBlocker block(iteration_box_);
    iteration_box_->setCurrentIndex(pair);
  }
  setOffset(comparison_->iterationOffset(static_cast<std::size_t>(pair)));
}

void ComparisonView::jumpToPair(const core::MatchedCollective& pair) {
  const OpRef p = comparison_->predictedOp(pair), m = comparison_->measuredOp(pair);
  if (!p.valid() || !m.valid()) return;
  const core::OpTiming &tp = comparison_->predictedStore()->timing(p), &tm = comparison_->measuredStore()->timing(m);
  // Each pane zoomed to its own op (a prediction can be off by orders of magnitude, and one zoom
  // would hide one of the two), the starts lined up: the offset becomes their difference.
  const auto around = [](TimelineView* view, const core::OpTiming& t) {
    const double width = std::max(8 * (t.end - t.start), 1e-7);
    view->setVisibleRange(t.start - width / 4, t.start + width * 3 / 4);
  };
  const QScopedValueRollback<bool> guard(syncing_, true);  // each pane keeps its own zoom
  setOffset(tm.start - tp.start);
  around(predicted_, tp);
  around(measured_, tm);
  predicted_->selectOp(p);
  measured_->selectOp(m);
}

void ComparisonView::updateGhost() {
  predicted_->setGhost(ghost_->isChecked() ? comparison_->measuredStore() : nullptr, offset_);
}

void ComparisonView::rangeSelectedOn(bool predicted_pane, double start, double end) {
  if (selecting_range_) return;  // the other pane's echo of the range set below
  const QScopedValueRollback<bool> guard(selecting_range_, true);
  const double begin = predicted_pane ? start : start - offset_, finish = predicted_pane ? end : end - offset_;
  if (predicted_pane) measured_->setSelectedRange(begin + offset_, finish + offset_);
  else predicted_->setSelectedRange(begin, finish);
  range_model_->setRange(begin, finish, offset_);
  panels_->setCurrentWidget(range_table_);
}

}  // namespace stratsim::gui
