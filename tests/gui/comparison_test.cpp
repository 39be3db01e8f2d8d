// Two runs side by side, as a person uses it under Qt's offscreen platform: a simulation of
// DDP(SimpleMLP) and the real PyTorch profiler trace of that run (tests/data/kineto) opened in a
// comparison tab; then real mouse, wheel, key and click events: panes locked and unlocked, a
// matched-ops row clicked, the offset typed, an iteration aligned, ghost mode, a range selected.
// The pure models are checked under QAbstractItemModelTester against core's figures.
#include <QAbstractItemModelTester>
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLineEdit>
#include <QPushButton>
#include <QSettings>
#include <QSortFilterProxyModel>
#include <QTabWidget>
#include <QTableView>
#include <QTemporaryDir>
#include <QtTest/QtTest>

#include <cmath>
#include <cstdlib>

#include "gui_support.hpp"
#include "model/comparison_models.hpp"
#include "model/run_comparison.hpp"
#include "stratsim/core/run_analysis.hpp"
#include "widgets/comparison_view.hpp"
#include "widgets/main_window.hpp"
#include "widgets/timeline_view.hpp"

using namespace stratsim;
using namespace stratsim::gui;

namespace {

using test::run;
using test::wheel;

void drag(QWidget* widget, QPoint from, QPoint to, Qt::KeyboardModifiers modifiers = Qt::NoModifier) {
  QTest::mousePress(widget, Qt::LeftButton, modifiers, from);
  QTest::mouseMove(widget, (from + to) / 2);
  QTest::mouseMove(widget, to);
  QTest::mouseRelease(widget, Qt::LeftButton, modifiers, to);
}

bool near(double a, double b) { return std::fabs(a - b) <= 1e-9 + 1e-9 * std::fabs(b); }

}  // namespace

class ComparisonTest : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  QString simulation_, other_platform_, report_;
  const QString trace_ = QStringLiteral(STRATSIM_TEST_DATA "/kineto/ddp_simplemlp_gloo");

  // A window with the comparison of PREDICTED and MEASURED as its current tab.
  std::unique_ptr<MainWindow> compare(const QString& predicted, const QString& measured) {
    auto window = std::make_unique<MainWindow>();
    window->resize(1400, 1000);
    window->show();
    if (!QTest::qWaitForWindowExposed(window.get())) return window;
    window->compareFiles(predicted, measured);
    window->waitForLoads();
    QApplication::processEvents();
    return window;
  }
  static ComparisonView* view(MainWindow* window) {
    return qobject_cast<ComparisonView*>(window->tabs()->currentWidget());
  }
  static QPoint centre(TimelineView* v) {
    return {TimelineView::kLabelWidth + v->timeAreaWidth() / 2, TimelineView::kAxisHeight + 30};
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    test::isolate_settings(dir_, "comparison-test");
    simulation_ = dir_.filePath("mlp.timeline.json");
    other_platform_ = dir_.filePath("mlp-h100.timeline.json");
    report_ = dir_.filePath("mlp.report.json");
    // What tests/data/kineto/record_gloo_ddp.py ran: DDP(SimpleMLP), 2 ranks, 3 steps.
    run(QStringLiteral("%1 simulate --model zoo:SimpleMLP --plan builtin:ddp --iterations 3 --platform cpu:procs=2 "
                       "--timeline %2 --json -o %3 --quiet")
            .arg(STRATSIM_BINARY, simulation_, report_));
    run(QStringLiteral("%1 simulate --model zoo:SimpleMLP --plan builtin:ddp --iterations 3 --platform h100 "
                       "--timeline %2 -o /dev/null --quiet")
            .arg(STRATSIM_BINARY, other_platform_));
  }

  void aSimulationAndItsTraceOpenSideBySideWithEveryCollectiveMatched() {
    auto window = compare(simulation_, trace_);
    QCOMPARE(window->tabs()->count(), 3);  // both runs, then their comparison
    ComparisonView* v = view(window.get());
    QVERIFY(v);
    QCOMPARE(v->comparison().result().matched.size(), std::size_t{16});
    QVERIFY(v->comparison().result().unmatched.empty());
    QCOMPARE(v->matchedModel()->rowCount(), 16);
    QCOMPARE(v->predictedView()->store()->recordedRanks(), 1);  // representative
    QCOMPARE(v->measuredView()->store()->recordedRanks(), 2);
    // opened aligned on the first iteration pair
    QVERIFY(near(v->offset(), v->comparison().iterationOffset(0)));
  }

  void lockedPanesZoomAndPanTogetherAndUnlockedOnesDoNot() {
    auto window = compare(simulation_, other_platform_);
    ComparisonView* v = view(window.get());
    QVERIFY(v && v->lockBox()->isChecked());
    TimelineView *a = v->predictedView(), *b = v->measuredView();
    wheel(a, centre(a), 240);  // zoom in
    const double width = a->visibleEnd() - a->visibleStart();
    QVERIFY(width < a->store()->makespan());
    drag(a, centre(a), centre(a) + QPoint(-200, 0));  // pan right in time
    QVERIFY(a->visibleStart() > 0);
    QVERIFY2(near(b->visibleStart(), a->visibleStart() + v->offset()), "the measured pane follows");
    QVERIFY(near(b->visibleEnd() - b->visibleStart(), width));
    // and the other way round
    drag(b, centre(b), centre(b) + QPoint(100, 0));
    QVERIFY(near(a->visibleStart(), b->visibleStart() - v->offset()));

    QTest::mouseClick(v->lockBox(), Qt::LeftButton);
    QVERIFY(!v->lockBox()->isChecked());
    const double b_start = b->visibleStart();
    drag(a, centre(a), centre(a) + QPoint(-150, 0));
    QCOMPARE(b->visibleStart(), b_start);
  }

  void clickingAMatchedRowSelectsTheOpInBothPanesAndLinesThemUp() {
    auto window = compare(simulation_, trace_);
    ComparisonView* v = view(window.get());
    QVERIFY(v);
    QTableView* table = v->matchedTable();
    v->panels()->setCurrentWidget(table);
    QApplication::processEvents();
    const QModelIndex index = table->model()->index(2, 0);
    QTest::mouseClick(table->viewport(), Qt::LeftButton, Qt::NoModifier, table->visualRect(index).center());
    const auto* proxy = static_cast<const QSortFilterProxyModel*>(table->model());
    const core::MatchedCollective& pair = v->matchedModel()->pairOfRow(proxy->mapToSource(index).row());
    const OpRef p = v->comparison().predictedOp(pair), m = v->comparison().measuredOp(pair);
    QVERIFY(p.valid() && m.valid());
    QCOMPARE(v->predictedView()->selectedOp(), p);
    QCOMPARE(v->measuredView()->selectedOp(), m);
    // the predicted op of the row is the collective the row names, on the rank it names
    QCOMPARE(v->predictedView()->store()->op(p).name,
             v->comparison().predictedSide().labels[v->comparison().predictedCollective(pair).label]);
    QCOMPARE(v->measuredView()->store()->result().recorded[m.recorded].front(), pair.rank);
    const core::OpTiming &tp = v->predictedView()->store()->timing(p), &tm = v->measuredView()->store()->timing(m);
    QVERIFY(near(v->offset(), tm.start - tp.start));
    QVERIFY(v->predictedView()->visibleStart() <= tp.start && tp.end <= v->predictedView()->visibleEnd());
    QVERIFY(v->measuredView()->visibleStart() <= tm.start && tm.end <= v->measuredView()->visibleEnd());
    // the row with the largest |error| comes first
    const auto error = [&](int row) {
      return std::fabs(table->model()->index(row, MatchedOpsModel::error).data(kRawValueRole).toDouble());
    };
    QVERIFY(error(0) >= error(1) && error(1) >= error(2));
  }

  void theOffsetIsTypedAndAnIterationAligned() {
    auto window = compare(simulation_, other_platform_);
    ComparisonView* v = view(window.get());
    QVERIFY(v);
    QLineEdit* edit = v->offsetBox()->findChild<QLineEdit*>();
    QVERIFY(edit);
    edit->selectAll();
    QTest::keyClicks(edit, QStringLiteral("0.05"));
    QTest::keyClick(edit, Qt::Key_Enter);
    QVERIFY(near(v->offset(), 0.05e-3));
    QVERIFY(near(v->measuredView()->visibleStart(), v->predictedView()->visibleStart() + 0.05e-3));
    v->iterationBox()->setCurrentIndex(2);
    QTest::mouseClick(v->alignButton(), Qt::LeftButton);
    QVERIFY(near(v->offset(), v->comparison().iterationOffset(2)));
    // iteration 3 starts where the prediction's iteration 3 starts, in both runs' analyses
    const double p3 = v->predictedView()->store()->analysis().iterations[2].start;
    const double m3 = v->measuredView()->store()->analysis().iterations[2].start;
    QVERIFY(near(v->offset(), m3 - p3));
  }

  void ghostModeOutlinesTheMeasuredOpsOverThePrediction() {
    auto window = compare(simulation_, other_platform_);
    ComparisonView* v = view(window.get());
    QVERIFY(v);
    TimelineView* a = v->predictedView();
    a->grab();
    QCOMPARE(a->ghostOutlinesDrawn(), 0);
    QTest::mouseClick(v->ghostBox(), Qt::LeftButton);
    QVERIFY(a->ghost() == v->measuredView()->store());
    a->grab();
    QVERIFY(a->ghostOutlinesDrawn() > 0);
    QTest::mouseClick(v->ghostBox(), Qt::LeftButton);
    a->grab();
    QCOMPARE(a->ghostOutlinesDrawn(), 0);
  }

  void aRangeSelectedInOnePaneGivesBothRunsStatisticsAndTheirDeltas() {
    auto window = compare(simulation_, other_platform_);
    ComparisonView* v = view(window.get());
    QVERIFY(v);
    TimelineView* a = v->predictedView();
    const QPoint from = centre(a) + QPoint(-300, 0), to = centre(a) + QPoint(200, 0);
    drag(a, from, to, Qt::ControlModifier);
    QVERIFY(a->selectedRange().has_value());
    const auto [begin, end] = *a->selectedRange();
    QVERIFY(v->measuredView()->selectedRange().has_value());
    QVERIFY(near(v->measuredView()->selectedRange()->first, begin + v->offset()));
    QCOMPARE(v->panels()->currentWidget(), static_cast<QWidget*>(v->rangeTable()));
    RangeDeltaModel* model = v->rangeModel();
    QCOMPARE(model->rowCount(), static_cast<int>(RangeDeltaModel::row_count));
    const auto& pa = *a->store();
    const core::RankStats expected = core::analyse_window(pa.program(), pa.result(), begin, end).front();
    QCOMPARE(model->value(RangeDeltaModel::compute, false), expected.compute);
    const auto& pb = *v->measuredView()->store();
    const core::RankStats other =
        core::analyse_window(pb.program(), pb.result(), begin + v->offset(), end + v->offset()).front();
    QCOMPARE(model->value(RangeDeltaModel::communication, true), other.communication);
    QCOMPARE(model->index(RangeDeltaModel::communication, RangeDeltaModel::delta).data(kRawValueRole).toDouble(),
             other.communication - model->value(RangeDeltaModel::communication, false));
  }

  void countsAreDiffedPerKeyAndGroup() {
    auto window = compare(simulation_, trace_);
    ComparisonView* v = view(window.get());
    QVERIFY(v);
    QAbstractItemModel* counts = v->countsTable()->model();
    QCOMPARE(counts->rowCount(), 3);  // allgather, allreduce, broadcast: the same counts in both runs
    for (int row = 0; row < 3; ++row)
      QCOMPARE(counts->index(row, CountsDiffModel::change).data().toString(), QStringLiteral("unchanged"));
    QCOMPARE(counts->index(1, CountsDiffModel::comm_key).data().toString(), QStringLiteral("c10d.allreduce_"));
    QCOMPARE(counts->index(1, CountsDiffModel::measured).data().toInt(), 3);
  }

  void aReportHasNoRunToCompare() {
    auto window = compare(report_, trace_);
    QCOMPARE(window->tabs()->count(), 2);  // the two documents, no comparison
    QVERIFY2(window->lastError().contains(report_ + ": has no run to compare"), qPrintable(window->lastError()));
  }

  void theModelsPassQtsModelTester() {
    const LoadOutcome a = loadDocument(simulation_), b = loadDocument(trace_);
    QVERIFY(a.document && b.document);
    auto comparison = std::make_shared<const RunComparison>(a.document, b.document);
    MatchedOpsModel matched;
    ErrorSummaryModel kinds(ErrorSummaryModel::Grouping::kind_and_size), streams(ErrorSummaryModel::Grouping::stream);
    UnmatchedModel unmatched;
    CountsDiffModel counts;
    RangeDeltaModel range;
    QAbstractItemModelTester t1(&matched, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QAbstractItemModelTester t2(&kinds, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QAbstractItemModelTester t3(&streams, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QAbstractItemModelTester t4(&unmatched, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QAbstractItemModelTester t5(&counts, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QAbstractItemModelTester t6(&range, QAbstractItemModelTester::FailureReportingMode::QtTest);
    matched.setComparison(comparison);
    kinds.setComparison(comparison);
    streams.setComparison(comparison);
    unmatched.setComparison(comparison);
    counts.setComparison(comparison);
    range.setComparison(comparison);
    QCOMPARE(matched.rowCount(), 16);
    QCOMPARE(kinds.rowCount(), static_cast<int>(comparison->result().by_kind_size.size()));
    QCOMPARE(kinds.index(0, ErrorSummaryModel::mean_abs).data(kRawValueRole).toDouble(),
             *comparison->result().by_kind_size[0].mean_abs_error);
    QCOMPARE(streams.rowCount(), 1);
    QCOMPARE(unmatched.rowCount(), 0);
    QCOMPARE(range.rowCount(), static_cast<int>(RangeDeltaModel::row_count));
    // a signed error: predicted minus measured, over measured
    const core::MatchedCollective& first = matched.pairOfRow(0);
    QCOMPARE(matched.index(0, MatchedOpsModel::error).data(kRawValueRole).toDouble(),
             (first.predicted_duration - first.measured_duration) / first.measured_duration);
    matched.setComparison(nullptr);
    QCOMPARE(matched.rowCount(), 0);
  }
};

QTEST_MAIN(ComparisonTest)
#include "comparison_test.moc"
