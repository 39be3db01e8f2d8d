#include "model/document_loader.hpp"

#include <QtConcurrent/QtConcurrentRun>

#include "model/program_layout.hpp"
#include "stratsim/core/errors.hpp"
#include "stratsim/core/trace_timeline.hpp"

namespace stratsim::gui {

LoadOutcome loadDocument(const QString& path, const core::ReadProgress& progress) {
  LoadOutcome outcome;
  try {
    core::Document read = core::read_document(path.toStdString(), progress);
    auto document = std::make_shared<LoadedDocument>();
    document->path = path;
    document->kind = read.kind;
    switch (read.kind) {
      case core::DocumentKind::timeline: {
        auto store = std::make_shared<const TimelineStore>(std::move(read.timeline));
        document->summary = summaryOf(store->program(), store->result(), store->analysis());
        document->store = std::move(store);
        break;
      }
      case core::DocumentKind::program:
        document->store = std::make_shared<const TimelineStore>(unscheduledTimeline(std::move(read.program)));
        break;
      case core::DocumentKind::run_report:
        document->summary = summaryOf(read.report);
        break;
      case core::DocumentKind::profiler_trace: {
        core::TraceTimeline trace = core::trace_timeline(read.trace);
        document->trace_side =
            std::make_shared<const core::CollectiveSide>(core::trace_side(read.trace, path.toStdString()));
        document->trace_collective_ops = std::move(trace.collective_ops);
        document->trace_iteration_of_step = std::move(trace.iteration_of_step);
        auto store = std::make_shared<const TimelineStore>(std::move(trace.timeline));
        document->summary = summaryOf(store->program(), store->result(), store->analysis());
        document->store = std::move(store);
        break;
      }
    }
    outcome.document = std::move(document);
  } catch (const core::ReadCancelled&) {
    outcome.cancelled = true;
  } catch (const core::InputError& error) {
    outcome.error = QString::fromStdString(error.what());
  } catch (const std::exception& error) {
    // Not expected from a file core accepted; say so in the same one-line form.
    outcome.error = QStringLiteral("%1: %2").arg(path, QString::fromStdString(error.what()));
  }
  return outcome;
}

DocumentLoader::DocumentLoader(QObject* parent) : QObject(parent) {
  qRegisterMetaType<LoadOutcome>();
  connect(&watcher_, &QFutureWatcher<LoadOutcome>::finished, this, [this] { emit finished(watcher_.result()); });
}

DocumentLoader::~DocumentLoader() {
  cancel();
  watcher_.waitForFinished();
}

bool DocumentLoader::busy() const { return watcher_.isRunning(); }
void DocumentLoader::waitForFinished() { watcher_.waitForFinished(); }

void DocumentLoader::cancel() {
  if (cancel_) cancel_->store(true);
}

void DocumentLoader::load(const QString& path) {
  if (busy()) return;
  cancel_ = std::make_shared<std::atomic<bool>>(false);
  auto cancel = cancel_;
  QPointer<DocumentLoader> self(this);
  watcher_.setFuture(QtConcurrent::run([path, cancel, self] {
    return loadDocument(path, [cancel, self](double fraction) {
      if (self)
        QMetaObject::invokeMethod(self, "progress", Qt::QueuedConnection, Q_ARG(int, static_cast<int>(fraction * 100)));
      return !cancel->load();
    });
  }));
}

}  // namespace stratsim::gui
