// The viewer's window: one tab per open file, File > Open (several at once), Open Recent, drag and
// drop, File > Compare (two open runs side by side in a tab of their own: comparison_view.hpp), a progress dialog with
// Cancel while a file loads off the UI thread, one error message per bad file (the core's words: file and field path)
// with the other tabs left as they were, and the window's state (geometry, splitter, current panel, recent files) kept
// between runs in QSettings.
#pragma once

#include <QMainWindow>
#include <QStringList>
#include <QTemporaryDir>

#include <map>
#include <memory>

#include "model/document_loader.hpp"
#include "model/what_if.hpp"

class QTabWidget;
class QProgressDialog;
class QMenu;

namespace stratsim::gui {

class DocumentView;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  void openFiles(const QStringList& paths);  // queued; loaded one after another
  // Opens both files (if not open yet) and then their comparison tab; MEASURED is the reference.
  void compareFiles(const QString& predicted, const QString& measured);
  // A comparison tab for two open documents; a document without a run says so in a message.
  void compareDocuments(std::shared_ptr<const LoadedDocument> predicted,
                        std::shared_ptr<const LoadedDocument> measured);
  void chooseComparison();  // File > Compare: pick two open tabs
  // `roles` name the panes ("predicted"/"measured"; "before"/"after" for a what-if re-run).
  void compareDocuments(std::shared_ptr<const LoadedDocument> predicted, std::shared_ptr<const LoadedDocument> measured,
                        std::pair<QString, QString> roles);

  // What-if: File > New simulation's dialog; a simulation or a real Gloo run of `inputs` in a
  // `stratsim` child (progress dialog with Cancel) that opens as a tab with a Plan panel, beside
  // `beside` when given (the run it was edited from, or the simulation it measures).
  void newSimulation();
  void startJob(StratsimJob::Kind kind, const WhatIfInputs& inputs,
                std::shared_ptr<const LoadedDocument> beside = nullptr);
  StratsimJob* job() const { return job_.get(); }
  void cancelJob();
  void waitForJob();  // for tests: returns when the job, and the loads it started, are done
  bool loading() const;
  void waitForLoads();  // for tests and the command line: returns when the queue is empty

  QTabWidget* tabs() const { return tabs_; }
  DocumentView* currentDocument() const;
  QStringList recentFiles() const { return recent_; }
  const QString& lastError() const { return last_error_; }
  QMenu* recentMenu() const { return recent_menu_; }

 signals:
  void documentOpened(const QString& path);
  void loadFailed(const QString& message);

 protected:
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;
  void closeEvent(QCloseEvent* event) override;

 private:
  void buildMenus();
  void startNextLoad();
  void loadFinished(const LoadOutcome& outcome);
  void addRecent(const QString& path);
  void rebuildRecentMenu();
  void saveState() const;
  void restoreState();
  void showShortcuts();
  void showError(const QString& title, const QString& message);
  std::shared_ptr<const LoadedDocument> openDocument(const QString& path) const;
  void comparePending();

  QTabWidget* tabs_;
  DocumentLoader loader_;
  QStringList queue_;
  QString loading_path_;
  QProgressDialog* progress_ = nullptr;
  QMenu* recent_menu_ = nullptr;
  QStringList recent_;
  QString last_error_;
  QStringList pending_comparison_;  // predicted, measured: waiting for both to open
  void jobFinished(bool ok, const QString& error);
  void attachWhatIf(class DocumentView* view);
  QTemporaryDir work_dir_;  // what-if plans and timelines, removed with the window
  std::unique_ptr<StratsimJob> job_;
  std::shared_ptr<const LoadedDocument> job_beside_;
  QProgressDialog* job_progress_ = nullptr;
  // A what-if timeline waiting to open: its inputs, how it came, and the run to compare it with.
  struct PendingWhatIf {
    WhatIfInputs inputs;
    StratsimJob::Kind kind = StratsimJob::Kind::simulate;
    std::shared_ptr<const LoadedDocument> beside;
  };
  std::map<QString, PendingWhatIf> what_if_;
  QByteArray splitter_state_;
  int panel_index_ = 0;
};

}  // namespace stratsim::gui
