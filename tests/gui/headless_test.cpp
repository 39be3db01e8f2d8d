// stratsim-view without a display: --render draws a PNG (size and the colours at known ops
// checked), --report prints the numbers the panels show (checked against core's analysis of the
// same file), and bad input exits 2 with one line on stderr and leaves no PNG. Also regenerates
// the README's screenshot and compares it with the committed one (size and key pixel colours).
#include <sys/stat.h>

#include <QFile>
#include <QFileInfo>
#include <QImage>
#include <QProcess>
#include <QProcessEnvironment>
#include <QTemporaryDir>
#include <QtTest/QtTest>

#include <cstdlib>
#include <thread>

#include "model/document_loader.hpp"
#include "model/viewport.hpp"
#include "stratsim/core/document.hpp"
#include "widgets/timeline_view.hpp"

using namespace stratsim;
using namespace stratsim::gui;

namespace {

struct Result {
  int code = -1;
  QString out, err;
};

// `without_display`: no DISPLAY, WAYLAND_DISPLAY or QT_QPA_PLATFORM, as over SSH or on a CI box.
Result view(const QStringList& arguments, bool without_display = false) {
  QProcess process;
  if (without_display) {
    QProcessEnvironment environment = QProcessEnvironment::systemEnvironment();
    for (const char* name : {"DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"}) environment.remove(QString(name));
    process.setProcessEnvironment(environment);
  }
  process.start(QStringLiteral(STRATSIM_VIEW_BINARY), arguments);
  process.waitForFinished(120000);
  return {process.exitStatus() == QProcess::NormalExit ? process.exitCode() : -1,
          QString::fromUtf8(process.readAllStandardOutput()), QString::fromUtf8(process.readAllStandardError())};
}

// The screenshot in the README: FSDP on one node of 4 H100s, 2 steps, representative mode.
QString screenshot_command(const QString& timeline) {
  return QStringLiteral(
             "%1 simulate --plan builtin:fsdp --iterations 2 --platform h100:nodes=1,gpus=4 --timeline %2 --quiet -o "
             "/dev/null")
      .arg(STRATSIM_BINARY, timeline);
}

}  // namespace

class HeadlessTest : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  QString timeline_;

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    timeline_ = dir_.filePath("fsdp.timeline.json");
    QCOMPARE(std::system(screenshot_command(timeline_).toLocal8Bit().constData()), 0);
  }

  void rendersTheTimelineToAPng() {
    const QString png = dir_.filePath("timeline.png");
    const Result r = view({"--render", png, "--size", "1200x500", timeline_});
    QCOMPARE(r.code, 0);
    QVERIFY(r.err.isEmpty() || !r.err.contains("error"));
    const QImage image(png);
    QCOMPARE(image.size(), QSize(1200, 500));
    // The first all-gather (FSDP unshard of the first unit) starts the run on the all-gather stream.
    const LoadOutcome loaded = loadDocument(timeline_);
    QVERIFY(loaded.document);
    TimelineView reference;
    reference.resize(1200, 500);
    reference.setStore(loaded.document->store);
    const TimelineStore& store = *loaded.document->store;
    OpRef gather;
    for (OpRef op : store.find("all_gather"))
      if (store.op(op).iteration == 1) {
        gather = op;
        break;
      }
    QVERIFY(gather.valid());
    const QPoint at = reference.pointOf(gather);
    QVERIFY(at.x() > 0);
    const QColor seen = image.pixelColor(at.x(), at.y());
    const QColor expected = categoryColor(Category::all_gather);
    QVERIFY2(std::abs(seen.hue() - expected.hue()) < 8, qPrintable(seen.name() + " vs " + expected.name()));
    QCOMPARE(image.pixelColor(1199, 499).isValid(), true);
  }

  void rendersTheSummaryAndARange() {
    const QString png = dir_.filePath("summary.png");
    QCOMPARE(view({"--render", png, "--view", "summary", timeline_}).code, 0);
    QCOMPARE(QImage(png).size(), QSize(1600, 900));
    const QString zoomed = dir_.filePath("zoomed.png");
    QCOMPARE(view({"--render", zoomed, "--range", "0:100us", "--size", "800x400", timeline_}).code, 0);
    QCOMPARE(QImage(zoomed).size(), QSize(800, 400));
  }

  void rendersSvg() {
    const QString svg = dir_.filePath("timeline.svg");
    QCOMPARE(view({"--render", svg, "--size", "900x400", timeline_}).code, 0);
    QFile file(svg);
    QVERIFY(file.open(QIODevice::ReadOnly));
    const QByteArray text = file.readAll();
    QVERIFY(text.contains("<svg"));
    QVERIFY(text.contains("viewBox=\"0 0 900 400\""));
    QVERIFY(text.contains("iteration end"));  // the legend is vector text
  }

  void reportPrintsCoresFigures() {
    const Result whole = view({"--report", timeline_});
    QCOMPARE(whole.code, 0);
    const core::Document doc = core::read_document(timeline_.toStdString());
    const core::Analysis analysis = core::analyse(doc.timeline.program, doc.timeline.result, {});
    QVERIFY2(whole.out.contains(QStringLiteral("makespan %1").arg(formatTime(analysis.makespan))),
             qPrintable(whole.out));
    QVERIFY(whole.out.contains(formatTime(analysis.ranks[0].compute)));
    QVERIFY(whole.out.contains(formatTime(analysis.ranks[0].exposed_communication)));
    QVERIFY(whole.out.contains("c10d._allgather_base_") || whole.out.contains("all_gather"));
    const Result ranged = view({"--report", "--range", "100us:300us", timeline_});
    QCOMPARE(ranged.code, 0);
    const std::vector<core::RankStats> window =
        core::analyse_window(doc.timeline.program, doc.timeline.result, 100e-6, 300e-6);
    QVERIFY2(ranged.out.contains(formatTime(window[0].compute)), qPrintable(ranged.out));
    QVERIFY(ranged.out.contains("range 100 us .. 300 us"));
  }

  // Without a display: the help, the version and a render work; a window is refused in one line
  // (Qt would abort with a page about platform plugins).
  void withoutADisplayOnlyTheWindowIsRefused() {
    Result help = view({QStringLiteral("--help")}, true);
    QCOMPARE(help.code, 0);
    QVERIFY2(help.out.contains(QStringLiteral("--render")), qPrintable(help.out));
    QCOMPARE(view({QStringLiteral("--version")}, true).code, 0);
    const QString png = dir_.filePath("nodisplay.png");
    QCOMPARE(view({QStringLiteral("--render"), png, timeline_}, true).code, 0);
    QVERIFY(QFileInfo(png).size() > 0);
    Result window = view({timeline_}, true);
    QCOMPARE(window.code, 2);
    QCOMPARE(window.err, QStringLiteral("stratsim-view: error: no display to open a window on (set DISPLAY, run under "
                                        "xvfb-run, or use --render OUT.png / --report without one)\n"));
  }

  // The CLI's output rules (output_files.hpp): a link is written through, a FIFO and /dev/stdout in
  // place (QSaveFile replaced a FIFO with a regular file), an impossible path refused before the work.
  void rendersThroughLinksAndIntoPipes() {
    const QString real = dir_.filePath("real.png"), link = dir_.filePath("link.png");
    QVERIFY(QFile::link(real, link));
    QCOMPARE(view({QStringLiteral("--render"), link, timeline_}).code, 0);
    QVERIFY(QFileInfo(link).isSymLink());
    QVERIFY(QFileInfo(real).size() > 0);
    const QString fifo = dir_.filePath("pipe.png");
    QCOMPARE(::mkfifo(fifo.toLocal8Bit().constData(), 0600), 0);
    QByteArray drained;
    std::thread reader([&] {
      QFile in(fifo);
      if (in.open(QIODevice::ReadOnly)) drained = in.readAll();
    });
    const Result piped = view({QStringLiteral("--render"), fifo, timeline_});
    if (QFileInfo(fifo).isFile()) {
      reader.detach();
      QFAIL("the FIFO was replaced by a regular file");
    }
    reader.join();
    QCOMPARE(piped.code, 0);
    QVERIFY(drained.startsWith("\x89PNG"));
    const Result missing = view({QStringLiteral("--render"), QStringLiteral("/nonexistent/x.png"), timeline_});
    QCOMPARE(missing.code, 2);
    QCOMPARE(
        missing.err,
        QStringLiteral("stratsim-view: error: /nonexistent/x.png: cannot write file (no directory /nonexistent)\n"));
  }

  void badInputExitsTwoWithOneLineAndNoPng() {
    const QString bad = dir_.filePath("bad.json");
    QFile file(bad);
    QVERIFY(file.open(QIODevice::WriteOnly));
    file.write("{\"format\": \"stratsim.timeline\", \"version\": 7}");
    file.close();
    const QString png = dir_.filePath("never.png");
    const Result r = view({"--render", png, bad});
    QCOMPARE(r.code, 2);
    QCOMPARE(r.err,
             QStringLiteral("stratsim-view: error: %1: version: unsupported timeline version 7 (expected 1 or 2)\n")
                 .arg(bad));
    QVERIFY(!QFile::exists(png));
    const Result range = view({"--report", "--range", "5ms:1ms", timeline_});
    QCOMPARE(range.code, 2);
    QCOMPARE(range.err.count('\n'), 1);
    QVERIFY(range.err.contains("--range"));
    QCOMPARE(view({"--render", png, "--size", "10x10", timeline_}).code, 2);
    QCOMPARE(view({"--render", png, "--view", "flame", timeline_}).code, 2);
    QCOMPARE(view({"--report", dir_.filePath("absent.json")}).code, 2);
    QVERIFY(!QFile::exists(png));
  }

  // Two runs: --report prints `stratsim compare`'s text (one matching, in core), --render --view
  // compare draws the comparison tab; one FILE, or a run report, is refused in one line.
  void comparesASimulationWithItsProfilerTrace() {
    const QString simulation = dir_.filePath("mlp.timeline.json"), report = dir_.filePath("mlp.report.json");
    const QString trace = QStringLiteral(STRATSIM_TEST_DATA "/kineto/ddp_simplemlp_gloo");
    QCOMPARE(std::system(QStringLiteral("%1 simulate --model zoo:SimpleMLP --iterations 3 --platform cpu:procs=2 "
                                        "--timeline %2 --json -o %3 --quiet")
                             .arg(STRATSIM_BINARY, simulation, report)
                             .toLocal8Bit()
                             .constData()),
             0);
    const Result r = view({"--report", simulation, trace});
    QCOMPARE(r.code, 0);
    QProcess cli;
    cli.start(QStringLiteral(STRATSIM_BINARY), {"compare", simulation, trace});
    QVERIFY(cli.waitForFinished(60000));
    QCOMPARE(r.out, QString::fromUtf8(cli.readAllStandardOutput()));
    QVERIFY(r.out.contains("matched 16 collectives: 16 of 16 predicted, 16 of 16 measured (0 unmatched)"));

    const QString png = dir_.filePath("compare.png");
    QCOMPARE(view({"--render", png, "--view", "compare", "--size", "1200x800", simulation, trace}).code, 0);
    const QImage image(png);
    QCOMPARE(image.size(), QSize(1200, 800));

    const Result one = view({"--compare", "--report", simulation});
    QCOMPARE(one.code, 2);
    QCOMPARE(one.err,
             QStringLiteral("stratsim-view: error: a comparison takes two FILEs, PREDICTED and MEASURED; got 1\n"));
    const Result with_report = view({"--report", report, trace});
    QCOMPARE(with_report.code, 2);
    QCOMPARE(with_report.err.count('\n'), 1);
    QVERIFY2(with_report.err.contains(report + ": has no run to compare"), qPrintable(with_report.err));
  }

  // docs/images/timeline.png is made by this command; regenerate it and compare.
  void theReadmeScreenshotIsCurrent() {
    const QString committed = QStringLiteral(STRATSIM_SOURCE_DIR "/docs/images/timeline.png");
    const QImage expected(committed);
    QVERIFY2(!expected.isNull(), qPrintable(committed));
    const QString png = dir_.filePath("readme.png");
    QCOMPARE(view({"--render", png, "--size", "1400x560", timeline_}).code, 0);
    const QImage image(png);
    QCOMPARE(image.size(), expected.size());
    // Key pixels: the lanes' colours along one row per lane, sampled every 40 px.
    int compared = 0, differing = 0;
    for (int y = TimelineView::kAxisHeight + 10; y < image.height() - TimelineView::kLegendHeight; y += 11)
      for (int x = TimelineView::kLabelWidth + 5; x < image.width(); x += 40) {
        ++compared;
        differing += image.pixel(x, y) != expected.pixel(x, y);
      }
    QVERIFY2(differing * 50 <= compared,
             qPrintable(QStringLiteral("%1 of %2 pixels differ").arg(differing).arg(compared)));
  }
};

QTEST_MAIN(HeadlessTest)
#include "headless_test.moc"
