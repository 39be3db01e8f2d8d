// Opening a file off the UI thread: core::read_document (core's reader, the CLI's error words)
// and, for a timeline, building the TimelineStore, in a worker; progress and the result come back
// as queued signals; cancel() stops the read at its next progress point.
#pragma once

#include <QFutureWatcher>
#include <QObject>
#include <QString>

#include <atomic>
#include <memory>
#include <optional>

#include "model/summary_data.hpp"
#include "model/timeline_store.hpp"
#include "stratsim/core/document.hpp"

namespace stratsim::gui {

// What a file opens as. For a program (plan --emit-program) the store holds an unscheduled
// timeline: each op in a slot (program_layout.hpp), not a time.
struct LoadedDocument {
  QString path;
  core::DocumentKind kind = core::DocumentKind::timeline;
  std::shared_ptr<const TimelineStore> store;  // timeline and program documents
  std::optional<SummaryData> summary;          // timeline and run report documents
};

struct LoadOutcome {
  std::shared_ptr<LoadedDocument> document;  // null on error or cancel
  QString error;                             // "FILE: FIELD: what was expected"
  bool cancelled = false;
};

// Reads and builds synchronously (the worker's body; also what --render and --report use).
// `progress` as for core::read_document.
LoadOutcome loadDocument(const QString& path, const core::ReadProgress& progress = {});

class DocumentLoader : public QObject {
  Q_OBJECT
 public:
  explicit DocumentLoader(QObject* parent = nullptr);
  ~DocumentLoader() override;
  void load(const QString& path);  // one load at a time; a second call while busy is ignored
  void cancel();
  bool busy() const;
  void waitForFinished();

 signals:
  void progress(int percent);
  void finished(stratsim::gui::LoadOutcome outcome);

 private:
  QFutureWatcher<LoadOutcome> watcher_;
  std::shared_ptr<std::atomic<bool>> cancel_;
};

}  // namespace stratsim::gui

Q_DECLARE_METATYPE(stratsim::gui::LoadOutcome)
