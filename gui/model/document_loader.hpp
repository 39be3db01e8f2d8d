// Opening a file off the UI thread: core::read_document (core's reader, the CLI's error words)
// and, for a timeline, building the TimelineStore, in a worker; progress and the result come back
// as queued signals; cancel() stops the read at its next progress point.
#pragma once

#include <QFutureWatcher>
#include <QObject>
#include <QString>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "model/summary_data.hpp"
#include "model/timeline_store.hpp"
#include "stratsim/core/document.hpp"
#include "stratsim/core/op_matching.hpp"

namespace stratsim::gui {

// What a file opens as. For a program (plan --emit-program) the store holds an unscheduled
// timeline: each op in a slot (program_layout.hpp), not a time. A PyTorch profiler trace (a file
// or a folder of per-rank files) opens as the timeline core::trace_timeline makes of it.
struct LoadedDocument {
  QString path;
  core::DocumentKind kind = core::DocumentKind::timeline;
  std::shared_ptr<const TimelineStore> store;  // timeline, program and profiler trace documents
  std::optional<SummaryData> summary;          // timeline, run report and profiler trace documents
  // Profiler traces: the trace's collectives as comparisons match them (core::trace_side), and
  // the store's op each became: [rank index][index into the rank's collectives] -> op id.
  std::shared_ptr<const core::CollectiveSide> trace_side;
  std::vector<std::vector<std::int32_t>> trace_collective_ops;
  std::map<int, int> trace_iteration_of_step;  // ProfilerStep#N -> the timeline's iteration
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
