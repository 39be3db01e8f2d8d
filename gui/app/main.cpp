// stratsim-view: the desktop viewer, and its headless uses.
//
//   stratsim-view [FILE...]                       open files in tabs
//   stratsim-view --render OUT.png|OUT.svg [--range START:END] [--size WxH] [--view timeline|summary] FILE
//   stratsim-view --report FILE [--range START:END]
//   stratsim-view --compare PREDICTED MEASURED    the two runs side by side (a comparison tab)
//   stratsim-view --report PREDICTED MEASURED     the matched-collectives report (as `stratsim compare`)
//   stratsim-view --render OUT.png --view compare PREDICTED MEASURED
//
// --render and --report need no display (Qt's offscreen platform is chosen for them). Bad input:
// exit 2, one line on stderr ("stratsim-view: error: FILE: FIELD: what was expected"), no PNG.
#include <QApplication>
#include <QBuffer>
#include <QCommandLineParser>
#include <QDir>
#include <QFileInfo>
#include <QImage>
#include <QPainter>
#include <QPixmap>
#include <QSplitter>
#include <QSvgGenerator>
#include <QTableView>
#include <QTextStream>

#include <cstdio>
#include <cstring>
#include <optional>

#include "model/comparison_models.hpp"
#include "model/report_text.hpp"
#include "model/run_comparison.hpp"
#include "stratsim/cli/output_files.hpp"
#include "stratsim/core/errors.hpp"
#include "stratsim/core/op_matching.hpp"
#include "widgets/comparison_view.hpp"
#include "widgets/main_window.hpp"
#include "widgets/panels.hpp"
#include "widgets/timeline_view.hpp"

namespace {

using namespace stratsim::gui;

constexpr int kBadInput = 2;

[[noreturn]] void fail(const QString& message) {
  QTextStream(stderr) << "stratsim-view: error: " << message << '\n';
  std::exit(kBadInput);
}

// The uses that open no window: rendering, the report, and the help and version texts.
bool wants_headless(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    for (const char* option : {"--render", "--report", "--help", "-h", "--help-all", "--version", "-v"})
      if (std::strcmp(argv[i], option) == 0 ||
          (std::strncmp(argv[i], option, std::strlen(option)) == 0 && argv[i][std::strlen(option)] == '='))
        return true;
  return false;
}

// A window needs a display: without one (an SSH session, a CI box) Qt aborts with a page of
// advice about platform plugins. Said in one line instead, before Qt tries.
bool has_display() {
  return !qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM") || !qEnvironmentVariableIsEmpty("DISPLAY") ||
         !qEnvironmentVariableIsEmpty("WAYLAND_DISPLAY");
}

QSize parse_size(const QString& text) {
  const QStringList parts = text.toLower().split('x');
  bool ok_w = false, ok_h = false;
  const int w = parts.size() == 2 ? parts[0].toInt(&ok_w) : 0, h = parts.size() == 2 ? parts[1].toInt(&ok_h) : 0;
  if (!ok_w || !ok_h || w < 200 || h < 120 || w > 16384 || h > 16384)
    fail(QStringLiteral("--size: expected WIDTHxHEIGHT between 200x120 and 16384x16384, got \"%1\"").arg(text));
  return {w, h};
}

LoadOutcome load_or_fail(const QString& file) {
  LoadOutcome outcome = loadDocument(file);
  if (!outcome.document) fail(outcome.error);
  return outcome;
}

std::shared_ptr<const RunComparison> compare_or_fail(const QStringList& files) {
  const LoadOutcome predicted = load_or_fail(files[0]), measured = load_or_fail(files[1]);
  try {
    return std::make_shared<const RunComparison>(predicted.document, measured.document);
  } catch (const stratsim::core::InputError& error) {
    fail(QString::fromStdString(error.what()));
  }
}

// `stratsim compare`'s text for the same two runs: one matching, one report.
int compare_report(const QStringList& files, int top) {
  const auto comparison = compare_or_fail(files);
  QTextStream(stdout) << QString::fromStdString(stratsim::core::op_comparison_text(
      comparison->result(), comparison->predictedSide(), comparison->measuredSide(), top));
  return 0;
}

void write_or_fail(const QString& out, const QByteArray& bytes) {
  try {
    stratsim::cli::write_atomically(out.toStdString(), bytes.toStdString());
  } catch (const stratsim::core::InputError& error) {
    fail(QString::fromStdString(error.what()));
  }
}

// The comparison tab as the window shows it, drawn offscreen to OUT.png.
int render_comparison(const QString& out, const QStringList& files, QSize size) {
  try {
    stratsim::cli::check_writable({out.toStdString()});
  } catch (const stratsim::core::InputError& error) {
    fail(QString::fromStdString(error.what()));
  }
  ComparisonView view(compare_or_fail(files));
  view.resize(size);
  view.splitter()->setSizes({size.height() * 3 / 8, size.height() * 3 / 8, size.height() / 4});
  view.setAttribute(Qt::WA_DontShowOnScreen);
  view.show();
  QApplication::processEvents();
  if (view.matchedModel()->rowCount() > 0) view.matchedTable()->selectRow(0);
  QApplication::processEvents();
  QByteArray bytes;
  QBuffer buffer(&bytes);
  buffer.open(QIODevice::WriteOnly);
  if (!view.grab().save(&buffer, "PNG")) fail(QStringLiteral("%1: cannot encode the image").arg(out));
  write_or_fail(out, bytes);
  return 0;
}

// Draws the view to OUT: PNG, or SVG when OUT ends in .svg (vector text and axes; the lanes are an
// embedded image, as the viewer draws them).
int render(const QString& out, const QString& file, std::optional<std::pair<double, double>> range, QSize size,
           const QString& view) {
  try {
    stratsim::cli::check_writable({out.toStdString()});  // before the reading and the drawing
  } catch (const stratsim::core::InputError& error) {
    fail(QString::fromStdString(error.what()));
  }
  const LoadOutcome outcome = load_or_fail(file);
  const LoadedDocument& document = *outcome.document;
  const bool summary = view == QLatin1String("summary");
  if (summary && !document.summary)
    fail(QStringLiteral("%1: a program has no run to summarise; use --view timeline").arg(file));
  if (!summary && !document.store)
    fail(QStringLiteral("%1: a run report has no timeline; use --view summary").arg(file));
  SummaryCharts charts;
  TimelineView timeline;
  if (summary) {
    charts.setSummary(*document.summary);
  } else {
    timeline.resize(size);
    timeline.setStore(document.store);
    if (range) timeline.setVisibleRange(range->first, range->second);
  }
  const auto draw = [&](QPainter& painter) {
    if (summary) charts.render(painter, size);
    else timeline.render(painter, size);
  };
  // Drawn into memory, then written by the CLI's output rules (core/cli/.../output_files.hpp): all
  // or nothing, a link written through, a FIFO or /dev/stdout written in place, never replaced.
  QByteArray bytes;
  QBuffer buffer(&bytes);
  buffer.open(QIODevice::WriteOnly);
  bool drawn = true;
  if (out.endsWith(QLatin1String(".svg"), Qt::CaseInsensitive)) {
    QSvgGenerator svg;
    svg.setOutputDevice(&buffer);
    svg.setSize(size);
    svg.setViewBox(QRect(QPoint(0, 0), size));
    svg.setTitle(QStringLiteral("stratsim-view %1").arg(QFileInfo(file).fileName()));
    QPainter painter(&svg);
    draw(painter);
  } else {
    QImage image(size, QImage::Format_RGB32);
    QPainter painter(&image);
    draw(painter);
    painter.end();
    drawn = image.save(&buffer, "PNG");
  }
  if (!drawn) fail(QStringLiteral("%1: cannot encode the image").arg(out));
  write_or_fail(out, bytes);
  return 0;
}

}  // namespace

// Headless runs print one line on failure and nothing else: Qt's own warnings (a missing
// XDG_RUNTIME_DIR, font lookups) are for interactive sessions.
void quiet_messages(QtMsgType type, const QMessageLogContext&, const QString& message) {
  if (type == QtCriticalMsg || type == QtFatalMsg) QTextStream(stderr) << message << '\n';
}

int main(int argc, char** argv) {
  const bool headless = wants_headless(argc, argv);
  if (headless) {
    qInstallMessageHandler(quiet_messages);
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  } else if (!has_display()) {
    QTextStream(stderr) << "stratsim-view: error: no display to open a window on (set DISPLAY, run under xvfb-run, "
                           "or use --render OUT.png / --report without one)\n";
    return kBadInput;
  }
  QApplication app(argc, argv);
  QApplication::setOrganizationName(QStringLiteral("stratsim"));
  QApplication::setApplicationName(QStringLiteral("stratsim-view"));
  QApplication::setApplicationVersion(QStringLiteral("0.1.0"));

  QCommandLineParser parser;
  parser.setApplicationDescription(QStringLiteral("The stratsim timeline viewer"));
  parser.addHelpOption();
  parser.addVersionOption();
  const QCommandLineOption render_option(QStringLiteral("render"),
                                         QStringLiteral("Draw FILE's view to OUT.png (or OUT.svg) and exit"),
                                         QStringLiteral("OUT.png"));
  const QCommandLineOption report_option(
      QStringLiteral("report"),
      QStringLiteral("Print FILE's range statistics and collective counts and exit (PREDICTED MEASURED: the "
                     "matched-collectives report of stratsim compare)"));
  const QCommandLineOption range_option(QStringLiteral("range"),
                                        QStringLiteral("Time range START:END (units s, ms, us, ns; default seconds)"),
                                        QStringLiteral("START:END"));
  const QCommandLineOption size_option(QStringLiteral("size"), QStringLiteral("Image size for --render"),
                                       QStringLiteral("WxH"), QStringLiteral("1600x900"));
  const QCommandLineOption view_option(QStringLiteral("view"),
                                       QStringLiteral("timeline, summary or compare (two FILEs), for --render"),
                                       QStringLiteral("VIEW"), QStringLiteral("timeline"));
  const QCommandLineOption compare_option(
      QStringLiteral("compare"), QStringLiteral("Open PREDICTED and MEASURED side by side, collective by collective"));
  parser.addOptions({render_option, report_option, range_option, size_option, view_option, compare_option});
  parser.addPositionalArgument(QStringLiteral("files"),
                               QStringLiteral("Timelines, --json reports, programs or PyTorch profiler traces"),
                               QStringLiteral("[FILE...]"));
  if (!parser.parse(QApplication::arguments())) fail(parser.errorText());
  if (parser.isSet(QStringLiteral("help"))) parser.showHelp(0);
  if (parser.isSet(QStringLiteral("version"))) parser.showVersion();

  const QStringList files = parser.positionalArguments();
  std::optional<std::pair<double, double>> range;
  if (parser.isSet(range_option)) {
    range = parseRange(parser.value(range_option));
    if (!range)
      fail(QStringLiteral("--range: expected START:END with START < END, e.g. 1.5ms:3ms, got \"%1\"")
               .arg(parser.value(range_option)));
  }
  const QString view = parser.value(view_option);
  const bool comparing = parser.isSet(compare_option) || view == QLatin1String("compare") ||
                         (parser.isSet(report_option) && files.size() == 2);
  if (comparing && files.size() != 2)
    fail(QStringLiteral("a comparison takes two FILEs, PREDICTED and MEASURED; got %1").arg(files.size()));
  if (comparing && parser.isSet(report_option)) return compare_report(files, 15);
  if (comparing && parser.isSet(render_option))
    return render_comparison(parser.value(render_option), files, parse_size(parser.value(size_option)));
  if (parser.isSet(render_option) || parser.isSet(report_option)) {
    if (files.size() != 1)
      fail(QStringLiteral("--render and --report take one FILE (or PREDICTED MEASURED to compare), got %1")
               .arg(files.size()));
    if (parser.isSet(report_option)) {
      const LoadOutcome outcome = load_or_fail(files.front());
      QTextStream(stdout) << reportText(*outcome.document, range);
      return 0;
    }
    if (view != QLatin1String("timeline") && view != QLatin1String("summary"))
      fail(QStringLiteral("--view: expected timeline, summary or compare, got \"%1\"").arg(view));
    return render(parser.value(render_option), files.front(), range, parse_size(parser.value(size_option)), view);
  }
  MainWindow window;
  window.show();
  if (comparing) window.compareFiles(files[0], files[1]);
  else window.openFiles(files);
  return QApplication::exec();
}
