// The viewer's window: one tab per open file, File > Open (several at once), Open Recent, drag and
// drop, File > Compare (two open runs side by side in a tab of their own: comparison_view.hpp), a progress dialog with
// Cancel while a file loads off the UI thread, one error message per bad file (the core's words: file and field path)
// with the other tabs left as they were, and the window's state (geometry, splitter, current panel, recent files) kept
// between runs in QSettings.
#pragma once

#include <QMainWindow>
#include <QStringList>

#include "model/document_loader.hpp"

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
  QByteArray splitter_state_;
  int panel_index_ = 0;
};

}  // namespace stratsim::gui
