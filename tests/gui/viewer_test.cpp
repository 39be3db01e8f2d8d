// The viewer as a person uses it, under Qt's offscreen platform: files made by running the real
// simulator and planner open in tabs (command line, drag and drop, recent files); a bad file opens
// no tab and says which file and field; then real mouse, wheel and key events on the timeline,
// with assertions on the model state (visible range, selection, range statistics, highlights) and
// on the pixels drawn where known ops are.
#include <QAbstractItemView>
#include <QMenu>
#include <QMimeData>
#include <QSettings>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTabWidget>
#include <QTableView>
#include <QTemporaryDir>
#include <QToolTip>
#include <QtTest/QtTest>

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

#include "model/document_loader.hpp"
#include "stratsim/core/document.hpp"

#include "gui_support.hpp"
#include "model/table_models.hpp"
#include "widgets/document_view.hpp"
#include "widgets/main_window.hpp"
#include "widgets/panels.hpp"
#include "widgets/timeline_view.hpp"

using namespace stratsim;
using namespace stratsim::gui;

namespace {

using test::run;
using test::wheel;

}  // namespace

class ViewerTest : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  QString timeline_, report_, program_, bad_;

  QString path(const char* name) const { return dir_.filePath(QString::fromLatin1(name)); }

  MainWindow* openWindow(const QStringList& files) {
    auto* window = new MainWindow;
    window->resize(1400, 900);
    window->show();
    if (!QTest::qWaitForWindowExposed(window)) return window;
    window->openFiles(files);
    window->waitForLoads();
    return window;
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    test::isolate_settings(dir_, "viewer-test");
    QFont font("DejaVu Sans");
    font.setPixelSize(12);
    QApplication::setFont(font);
    timeline_ = path("ddp-tp.timeline.json");
    report_ = path("ddp-tp.report.json");
    program_ = path("ddp-tp.program.json");
    bad_ = path("bad.json");
    // DDP x TP on 2 nodes x 2 GPUs, every rank simulated, two steps.
    run(QStringLiteral("%1 simulate --plan builtin:ddp-tp --iterations 2 --platform h100:nodes=2,gpus=2 --ranks full "
                       "--timeline %2 --json -o %3 --quiet")
            .arg(STRATSIM_BINARY, timeline_, report_));
    run(QStringLiteral("%1 plan --plan builtin:ddp-tp --iterations 1 --emit-program %2 -o /dev/null")
            .arg(STRATSIM_BINARY, program_));
    QFile bad(bad_);
    QVERIFY(bad.open(QIODevice::WriteOnly));
    bad.write(R"({"format": "stratsim.timeline", "version": 2, "program": {"format": "stratsim.program"}})");
  }

  void opensEachKindInItsOwnTab() {
    std::unique_ptr<MainWindow> window(openWindow({timeline_, report_, program_}));
    QCOMPARE(window->tabs()->count(), 3);
    auto* timeline = qobject_cast<DocumentView*>(window->tabs()->widget(0));
    auto* report = qobject_cast<DocumentView*>(window->tabs()->widget(1));
    auto* program = qobject_cast<DocumentView*>(window->tabs()->widget(2));
    QVERIFY(timeline && timeline->timeline() && timeline->summary());
    QVERIFY(report && !report->timeline() && report->summary());
    QVERIFY(program && program->timeline() && !program->summary());
    QCOMPARE(timeline->timeline()->store()->recordedRanks(), 4);
    QCOMPARE(program->timeline()->store()->result().mode, std::string("unscheduled"));
    QCOMPARE(window->recentFiles().front(), QFileInfo(program_).absoluteFilePath());
    QCOMPARE(window->recentMenu()->actions().size(), 3);
  }

  void aBadFileOpensNoTabAndNamesTheField() {
    std::unique_ptr<MainWindow> window(openWindow({timeline_}));
    QSignalSpy failed(window.get(), &MainWindow::loadFailed);
    window->openFiles({bad_});
    window->waitForLoads();
    QCOMPARE(window->tabs()->count(), 1);
    QCOMPARE(failed.count(), 1);
    QCOMPARE(window->lastError(), bad_ + ": program.version: required field is missing");
    window->openFiles({path("missing.json")});
    window->waitForLoads();
    QCOMPARE(window->lastError(), path("missing.json") + ": cannot open file (No such file or directory)");
    QCOMPARE(window->tabs()->count(), 1);
  }

  void dropsOpenFiles() {
    std::unique_ptr<MainWindow> window(openWindow({}));
    QMimeData data;
    data.setUrls({QUrl::fromLocalFile(timeline_), QUrl::fromLocalFile(program_)});
    QDragEnterEvent enter(QPoint(100, 100), Qt::CopyAction, &data, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(window.get(), &enter);
    QVERIFY(enter.isAccepted());
    QDropEvent drop(QPointF(100, 100), Qt::CopyAction, &data, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(window.get(), &drop);
    window->waitForLoads();
    QCOMPARE(window->tabs()->count(), 2);
  }

  void windowStateIsKeptBetweenRuns() {
    QList<int> sizes;
    {
      std::unique_ptr<MainWindow> window(openWindow({timeline_}));
      DocumentView* view = window->currentDocument();
      view->splitter()->setSizes({600, 200});
      sizes = view->splitter()->sizes();
      view->panels()->setCurrentIndex(2);
      window->close();
    }
    std::unique_ptr<MainWindow> again(openWindow({timeline_}));
    QCOMPARE(again->currentDocument()->splitter()->sizes(), sizes);
    QCOMPARE(again->currentDocument()->panels()->currentIndex(), 2);
    QVERIFY(again->recentFiles().contains(QFileInfo(timeline_).absoluteFilePath()));
  }

  void wheelZoomsAroundTheCursor() {
    std::unique_ptr<MainWindow> window(openWindow({timeline_}));
    TimelineView* view = window->currentDocument()->timeline();
    const double before = view->visibleEnd() - view->visibleStart();
    const QPoint at(TimelineView::kLabelWidth + 300, 80);
    const auto time_at = [&](int x) {
      return view->visibleStart() +
             (x - TimelineView::kLabelWidth) * (view->visibleEnd() - view->visibleStart()) / view->timeAreaWidth();
    };
    const double anchored = time_at(at.x());
    wheel(view, at, 120);
    const double after = view->visibleEnd() - view->visibleStart();
    QVERIFY(std::abs(after - before / 1.25) < 1e-9 * before);
    QVERIFY(std::abs(time_at(at.x()) - anchored) < 1e-6 * before);
    wheel(view, at, -240, Qt::ControlModifier);  // Ctrl+wheel zooms too, here out
    QVERIFY(view->visibleEnd() - view->visibleStart() > after);
    QTest::keyClick(view, Qt::Key_F);  // fit all
    QVERIFY(view->visibleStart() <= 0 && view->visibleEnd() >= view->store()->makespan());
    QTest::keyClick(view, Qt::Key_W);
    QVERIFY(view->visibleEnd() - view->visibleStart() < view->store()->makespan());
    const double start = view->visibleStart();
    QTest::keyClick(view, Qt::Key_D);
    QVERIFY(view->visibleStart() > start);
  }

  void clickSelectsShowsDetailsAndDotSteps() {
    std::unique_ptr<MainWindow> window(openWindow({timeline_}));
    DocumentView* doc = window->currentDocument();
    TimelineView* view = doc->timeline();
    const TimelineStore& store = *view->store();
    // The DDP gradient all-reduce of iteration 2 on rank 1: find it by name, zoom onto it, click.
    const std::vector<OpRef> buckets = store.find("ddp bucket 0");
    QVERIFY(!buckets.empty());
    OpRef target;
    for (OpRef op : buckets)
      if (op.recorded == 1 && store.op(op).iteration == 2) target = op;
    QVERIFY(target.valid());
    const core::OpTiming& t = store.timing(target);
    view->setVisibleRange(t.start - (t.end - t.start), t.end + (t.end - t.start));
    const QPoint at = view->pointOf(target);
    QVERIFY(at.x() > 0);
    QCOMPARE(view->opAtPoint(at), target);
    QSignalSpy selected(view, &TimelineView::opSelected);
    QTest::mouseClick(view, Qt::LeftButton, Qt::NoModifier, at);
    QCOMPARE(view->selectedOp(), target);
    QCOMPARE(selected.count(), 1);
    QCOMPARE(doc->panels()->currentWidget(), doc->details());
    QVERIFY(doc->details()->toPlainText().contains("all_reduce"));
    QVERIFY(doc->details()->toPlainText().contains("group ranks"));
    // Its instances on the other ranks are linked.
    QCOMPARE(store.instancesOf(target).size(), std::size_t(2));
    // The pixel under it is the all-reduce colour.
    const QImage image = view->grab().toImage();
    QCOMPARE(image.pixelColor(at.x(), at.y() - 4), categoryColor(Category::all_reduce));
    // "." selects the next op on the lane, "," comes back.
    const OpRef next = store.nextOnLane(target);
    QTest::keyClick(view, Qt::Key_Period);
    QCOMPARE(view->selectedOp(), next.valid() ? next : target);
    QTest::keyClick(view, Qt::Key_Comma);
    QCOMPARE(view->selectedOp(), target);
    // A dependency link in the details jumps to it.
    const core::ProgramOp& op = store.op(target);
    QVERIFY(!op.deps.empty());
    emit doc->details()->anchorClicked(QUrl(QStringLiteral("op:%1:%2").arg(target.recorded).arg(op.deps.front())));
    QCOMPARE(view->selectedOp(), (OpRef{target.recorded, op.deps.front()}));
    QTest::keyClick(view, Qt::Key_Escape);
    QVERIFY(!view->selectedOp().valid());
  }

  void computeOpsAreDrawnInTheComputeColour() {
    std::unique_ptr<MainWindow> window(openWindow({timeline_}));
    TimelineView* view = window->currentDocument()->timeline();
    const TimelineStore& store = *view->store();
    OpRef forward;
    for (OpRef op : store.find("forward"))
      if (store.op(op).type == core::OpType::compute && op.recorded == 0) {
        forward = op;
        break;
      }
    QVERIFY(forward.valid());
    const core::OpTiming& t = store.timing(forward);
    view->setVisibleRange(t.start - 0.2 * (t.end - t.start), t.end + 0.2 * (t.end - t.start));
    const QPoint at = view->pointOf(forward);
    const QImage image = view->grab().toImage();
    QCOMPARE(image.pixelColor(at.x(), at.y() - 5), categoryColor(Category::compute));
    // The label column and the axis are not painted over.
    QVERIFY(image.pixelColor(5, at.y()) != categoryColor(Category::compute));
  }

  void axisDragSelectsARangeAndTheStatisticsFollow() {
    std::unique_ptr<MainWindow> window(openWindow({timeline_}));
    DocumentView* doc = window->currentDocument();
    TimelineView* view = doc->timeline();
    QTest::keyClick(view, Qt::Key_F);
    const int x0 = TimelineView::kLabelWidth + 100, x1 = TimelineView::kLabelWidth + 500;
    QSignalSpy ranged(view, &TimelineView::rangeSelected);
    QTest::mousePress(view, Qt::LeftButton, Qt::NoModifier, QPoint(x0, 10));
    QTest::mouseMove(view, QPoint(x0 + 50, 10));
    QTest::mouseMove(view, QPoint(x1, 10));
    QTest::mouseRelease(view, Qt::LeftButton, Qt::NoModifier, QPoint(x1, 10));
    QCOMPARE(ranged.count(), 1);
    const auto range = view->selectedRange();
    QVERIFY(range && range->second > range->first);
    QCOMPARE(doc->panels()->currentWidget(), static_cast<QWidget*>(doc->rangeTable()));
    const auto [begin, end] = doc->rangeModel()->range();
    QCOMPARE(begin, range->first);
    QCOMPARE(end, range->second);
    const std::vector<core::RankStats> expected =
        core::analyse_window(view->store()->program(), view->store()->result(), begin, end);
    QCOMPARE(
        doc->rangeModel()->data(doc->rangeModel()->index(2, RangeStatsModel::communication), kRawValueRole).toDouble(),
        expected[2].communication);
    // Z zooms to it; Escape clears it and the statistics return to the whole run.
    QTest::keyClick(view, Qt::Key_Z);
    QVERIFY(std::abs(view->visibleStart() - begin) < 1e-12 && std::abs(view->visibleEnd() - end) < 1e-12);
    QTest::keyClick(view, Qt::Key_Escape);
    QVERIFY(!view->selectedRange());
    QCOMPARE(doc->rangeModel()->range().second, view->store()->makespan());
  }

  void countsRowHighlightsItsOpsAndFindSelectsMatches() {
    std::unique_ptr<MainWindow> window(openWindow({timeline_}));
    DocumentView* doc = window->currentDocument();
    TimelineView* view = doc->timeline();
    QTableView* counts = doc->countsTable();
    QVERIFY(counts->model()->rowCount() > 0);
    counts->selectRow(0);
    const int source_row =
        static_cast<QSortFilterProxyModel*>(counts->model())->mapToSource(counts->model()->index(0, 0)).row();
    const std::size_t per_rank = doc->countsModel()->opsOfRow(source_row).size();
    QCOMPARE(view->highlightedOps().size(), per_rank * 4);
    // Ctrl+F opens the find bar; typing searches, Enter selects the first match.
    view->setFocus();
    QTest::keyClick(view, Qt::Key_F, Qt::ControlModifier);
    QVERIFY(doc->findBar()->isVisible());
    QTest::keyClicks(doc->findBar()->field(), "optimizer");
    QCOMPARE(view->highlightedOps().size(), doc->findBar()->matches().size());
    QVERIFY(!doc->findBar()->matches().empty());
    QTest::keyClick(doc->findBar(), Qt::Key_Return);
    QCOMPARE(view->selectedOp(), doc->findBar()->matches().front());
  }

  // Every document of the loader's fuzz corpus opens (or is refused) without harm, one tab each.
  void theCorpusOpens() {
    QStringList files;
    for (const QFileInfo& info : QDir(STRATSIM_TEST_DATA "/documents").entryInfoList({"*.json"}, QDir::Files))
      files << info.absoluteFilePath();
    QVERIFY(files.size() >= 5);
    std::unique_ptr<MainWindow> window(openWindow(files));
    QCOMPARE(window->tabs()->count(), files.size());
    QVERIFY(window->lastError().isEmpty());
    for (int i = 0; i < window->tabs()->count(); ++i) {
      window->tabs()->setCurrentIndex(i);
      QTest::qWait(1);
      QVERIFY(!window->tabs()->currentWidget()->grab().isNull());
    }
  }

  // A large file loads off the UI thread with progress; Cancel stops it and opens nothing.
  void loadingReportsProgressAndCancels() {
    core::Program program = core::read_document(timeline_.toStdString()).timeline.program;
    core::RunResult result = core::read_document(timeline_.toStdString()).timeline.result;
    // Many copies of rank 0's timings: a file of several MiB, so progress is reported.
    const auto timings = result.timings.front();
    result.timings.assign(3000, timings);
    result.recorded.clear();
    for (int s = 0; s < 3000; ++s) result.recorded.push_back({s % result.world_size});
    const QString big = path("big.timeline.json");
    {
      std::ofstream out(big.toStdString());
      out << core::timeline_json(program, result).dump();
    }
    QVERIFY(QFileInfo(big).size() > (3 << 20));
    DocumentLoader loader;
    QSignalSpy progress(&loader, &DocumentLoader::progress);
    QSignalSpy finished(&loader, &DocumentLoader::finished);
    loader.load(big);
    QVERIFY(finished.wait(60000));
    const auto outcome = finished.takeFirst().at(0).value<LoadOutcome>();
    QVERIFY2(outcome.document, qPrintable(outcome.error));
    QCOMPARE(outcome.document->store->recordedRanks(), 3000);
    QVERIFY(progress.count() >= 3);
    // Cancel, deterministically: the loader reads a FIFO, so it is still waiting for the bytes when
    // Cancel is pressed; the read then stops at its first progress point.
    const QString fifo = path("big.fifo");
    QCOMPARE(::mkfifo(fifo.toLocal8Bit().constData(), 0600), 0);
    loader.load(fifo);
    loader.cancel();
    {
      std::ofstream writer(fifo.toStdString(), std::ios::binary);
      std::ifstream reader(big.toStdString(), std::ios::binary);
      writer << reader.rdbuf();
    }
    QVERIFY(finished.wait(60000));
    const auto cancelled = finished.takeFirst().at(0).value<LoadOutcome>();
    QVERIFY(cancelled.cancelled);
    QVERIFY(!cancelled.document);
  }

  void dragPansCtrlDragSelectsAndHoverExplains() {
    std::unique_ptr<MainWindow> window(openWindow({timeline_}));
    TimelineView* view = window->currentDocument()->timeline();
    QTest::keyClick(view, Qt::Key_W);
    QTest::keyClick(view, Qt::Key_W);
    const double start = view->visibleStart(), width = view->visibleEnd() - view->visibleStart();
    // Drag left by 200 px: later times come into view, by 200 px worth of time.
    const int y = TimelineView::kAxisHeight + 60;
    QTest::mousePress(view, Qt::LeftButton, Qt::ShiftModifier, QPoint(700, y));
    QTest::mouseMove(view, QPoint(600, y));
    QTest::mouseMove(view, QPoint(500, y));
    QTest::mouseRelease(view, Qt::LeftButton, Qt::ShiftModifier, QPoint(500, y));
    QVERIFY(std::abs(view->visibleStart() - (start + 200.0 * width / view->timeAreaWidth())) < 1e-9 * width + 1e-15);
    QVERIFY(!view->selectedRange());
    // Ctrl+drag in the lanes selects a range instead.
    QSignalSpy ranged(view, &TimelineView::rangeSelected);
    QTest::mousePress(view, Qt::LeftButton, Qt::ControlModifier, QPoint(400, y));
    QTest::mouseMove(view, QPoint(450, y));
    QTest::mouseMove(view, QPoint(650, y));
    QTest::mouseRelease(view, Qt::LeftButton, Qt::ControlModifier, QPoint(650, y));
    QCOMPARE(ranged.count(), 1);
    QVERIFY(std::abs(ranged.first().at(1).toDouble() - ranged.first().at(0).toDouble() -
                     250.0 * (view->visibleEnd() - view->visibleStart()) / view->timeAreaWidth()) < 1e-12);
    // Home goes to the start of the run, End to its end, keeping the zoom.
    QTest::keyClick(view, Qt::Key_Home);
    QVERIFY(std::abs(view->visibleStart()) <= 0.03 * view->store()->makespan());
    QTest::keyClick(view, Qt::Key_End);
    QVERIFY(std::abs(view->visibleEnd() - view->store()->makespan()) <= 0.03 * view->store()->makespan());
    // Hovering an op explains it.
    const OpRef op = view->store()->find("optimizer").front();
    view->selectOp(op);
    const QPoint at = view->pointOf(op);
    QHelpEvent help(QEvent::ToolTip, at, view->mapToGlobal(at));
    QApplication::sendEvent(view, &help);
    QTRY_VERIFY(QToolTip::isVisible());
    QVERIFY2(QToolTip::text().contains(QString::fromStdString(view->store()->op(op).name)),
             qPrintable(QToolTip::text()));
  }

  void rankHeadersCollapse() {
    std::unique_ptr<MainWindow> window(openWindow({timeline_}));
    TimelineView* view = window->currentDocument()->timeline();
    const int before = view->layout().totalHeight();
    QTest::mouseClick(view, Qt::LeftButton, Qt::NoModifier, QPoint(30, TimelineView::kAxisHeight + 5));
    QVERIFY(view->layout().collapsed(0));
    QVERIFY(view->layout().totalHeight() < before);
    QTest::mouseClick(view, Qt::LeftButton, Qt::NoModifier, QPoint(30, TimelineView::kAxisHeight + 5));
    QVERIFY(!view->layout().collapsed(0));
  }
};

QTEST_MAIN(ViewerTest)
#include "viewer_test.moc"
