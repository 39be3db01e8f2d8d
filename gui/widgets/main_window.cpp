#include "widgets/main_window.hpp"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QComboBox>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QDragEnterEvent>
#include <QEventLoop>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QProgressDialog>
#include <QSettings>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QThread>

#include "model/run_comparison.hpp"
#include "stratsim/core/errors.hpp"
#include "widgets/comparison_view.hpp"
#include "widgets/document_view.hpp"
#include "widgets/timeline_view.hpp"
#include "widgets/what_if_widgets.hpp"

namespace stratsim::gui {
namespace {

constexpr int kRecentLimit = 10;

}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent), tabs_(new QTabWidget(this)) {
  setWindowTitle(QStringLiteral("stratsim-view"));
  setAcceptDrops(true);
  tabs_->setTabsClosable(true);
  tabs_->setDocumentMode(true);
  setCentralWidget(tabs_);
  connect(tabs_, &QTabWidget::tabCloseRequested, this, [this](int index) {
    QWidget* page = tabs_->widget(index);
    tabs_->removeTab(index);
    page->deleteLater();
  });
  connect(&loader_, &DocumentLoader::progress, this, [this](int percent) {
    if (progress_) progress_->setValue(percent);
  });
  connect(&loader_, &DocumentLoader::finished, this, &MainWindow::loadFinished);
  buildMenus();
  restoreState();
  statusBar()->showMessage(QStringLiteral("Open a timeline (simulate/run --timeline), a --json report or a program"));
  resize(1280, 800);
  QSettings settings;
  if (settings.contains("geometry")) restoreGeometry(settings.value("geometry").toByteArray());
}

MainWindow::~MainWindow() {
  loader_.cancel();
  loader_.waitForFinished();  // before work_dir_, which a what-if load may be reading, goes
}

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(QStringLiteral("&File"));
  QAction* open = file->addAction(QStringLiteral("&Open..."), this, [this] {
    const QStringList paths = QFileDialog::getOpenFileNames(
        this, QStringLiteral("Open"), QString(), QStringLiteral("stratsim documents (*.json);;All files (*)"));
    openFiles(paths);
  });
  open->setShortcut(QKeySequence::Open);
  recent_menu_ = file->addMenu(QStringLiteral("Open &Recent"));
  QAction* simulate = file->addAction(QStringLiteral("&New simulation..."), this, &MainWindow::newSimulation);
  simulate->setShortcut(QKeySequence::New);
  QAction* compare = file->addAction(QStringLiteral("&Compare..."), this, &MainWindow::chooseComparison);
  compare->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_K));
  QAction* close = file->addAction(QStringLiteral("&Close tab"), this, [this] {
    if (tabs_->count() > 0) emit tabs_->tabCloseRequested(tabs_->currentIndex());
  });
  close->setShortcut(QKeySequence::Close);
  file->addSeparator();
  QAction* quit = file->addAction(QStringLiteral("&Quit"), this, &QWidget::close);
  quit->setShortcut(QKeySequence::Quit);
  QMenu* help = menuBar()->addMenu(QStringLiteral("&Help"));
  QAction* keys = help->addAction(QStringLiteral("&Shortcuts"), this, &MainWindow::showShortcuts);
  keys->setShortcut(QKeySequence(Qt::Key_Question));
}

void MainWindow::showShortcuts() {
  QMessageBox::information(
      this, QStringLiteral("Shortcuts"),
      QStringLiteral("Wheel or Ctrl+wheel: zoom around the cursor; Alt+wheel: scroll lanes\n"
                     "Drag or Shift+drag: pan; Ctrl+drag or drag on the time axis: select a range\n"
                     "W/S: zoom in/out; A/D: pan; F: fit all; Z: zoom to the selected range or op\n"
                     ". and ,: next/previous op on the lane; Home/End: start/end of the run\n"
                     "Ctrl+F: find ops by name, module or collective kind; Escape: clear\n"
                     "Click a rank's header to collapse or expand its streams\n"
                     "Ctrl+K: compare two open runs side by side"));
}

void MainWindow::openFiles(const QStringList& paths) {
  for (const QString& path : paths)
    if (!path.isEmpty()) queue_ << path;
  startNextLoad();
}

bool MainWindow::loading() const { return loader_.busy() || !queue_.isEmpty() || !loading_path_.isEmpty(); }

void MainWindow::waitForLoads() {
  while (loading()) {
    loader_.waitForFinished();
    QApplication::processEvents(QEventLoop::AllEvents, 50);
  }
}

void MainWindow::startNextLoad() {
  if (!loading_path_.isEmpty() || queue_.isEmpty()) return;
  loading_path_ = queue_.takeFirst();
  if (!progress_) {
    progress_ = new QProgressDialog(this);
    progress_->setWindowTitle(QStringLiteral("Loading"));
    progress_->setRange(0, 100);
    progress_->setMinimumDuration(400);  // small files open without a flash
    progress_->setAutoReset(false);
    connect(progress_, &QProgressDialog::canceled, &loader_, &DocumentLoader::cancel);
  }
  progress_->setLabelText(QStringLiteral("Reading %1").arg(QFileInfo(loading_path_).fileName()));
  progress_->setValue(0);
  loader_.load(loading_path_);
}

void MainWindow::loadFinished(const LoadOutcome& outcome) {
  const QString path = std::exchange(loading_path_, QString());
  if (progress_) progress_->reset();
  if (outcome.cancelled) {
    statusBar()->showMessage(QStringLiteral("Cancelled: %1").arg(path));
  } else if (!outcome.document) {
    // No tab for a bad file; one message in the CLI's words; other tabs untouched.
    showError(QStringLiteral("Cannot open file"), outcome.error);
    if (pending_comparison_.contains(path)) pending_comparison_.clear();
    what_if_.erase(QFileInfo(path).absoluteFilePath());
  } else {
    auto* view = new DocumentView(outcome.document, tabs_);
    // The timeline gets most of the height until the user says otherwise (kept in the settings).
    if (splitter_state_.isEmpty() || !view->splitter()->restoreState(splitter_state_))
      view->splitter()->setSizes({3 * height() / 4, height() / 4});
    if (panel_index_ < view->panels()->count()) view->panels()->setCurrentIndex(panel_index_);
    const int index = tabs_->addTab(view, QFileInfo(path).fileName());
    tabs_->setTabToolTip(index, path);
    tabs_->setCurrentIndex(index);
    // A what-if run's timeline lives in this window's temporary folder: not one to reopen later.
    if (!QFileInfo(path).absoluteFilePath().startsWith(QDir(work_dir_.path()).absolutePath() + QLatin1Char('/')))
      addRecent(path);
    statusBar()->showMessage(QStringLiteral("Opened %1").arg(path));
    attachWhatIf(view);
    emit documentOpened(path);
    comparePending();
  }
  startNextLoad();
}

void MainWindow::showError(const QString& title, const QString& message) {
  last_error_ = message;
  statusBar()->showMessage(message);
  auto* box = new QMessageBox(QMessageBox::Warning, title, message, QMessageBox::Ok, this);
  box->setAttribute(Qt::WA_DeleteOnClose);
  box->open();
  emit loadFailed(message);
}

std::shared_ptr<const LoadedDocument> MainWindow::openDocument(const QString& path) const {
  const QString absolute = QFileInfo(path).absoluteFilePath();
  for (int i = tabs_->count() - 1; i >= 0; --i)
    if (const auto* view = qobject_cast<DocumentView*>(tabs_->widget(i)))
      if (QFileInfo(view->document().path).absoluteFilePath() == absolute) return view->sharedDocument();
  return nullptr;
}

void MainWindow::compareFiles(const QString& predicted, const QString& measured) {
  pending_comparison_ = {predicted, measured};
  QStringList missing;
  for (const QString& path : pending_comparison_)
    if (!openDocument(path)) missing << path;
  if (missing.isEmpty()) comparePending();
  else openFiles(missing);
}

void MainWindow::comparePending() {
  if (pending_comparison_.size() != 2) return;
  auto predicted = openDocument(pending_comparison_[0]), measured = openDocument(pending_comparison_[1]);
  if (!predicted || !measured) return;
  pending_comparison_.clear();
  compareDocuments(std::move(predicted), std::move(measured));
}

void MainWindow::compareDocuments(std::shared_ptr<const LoadedDocument> predicted,
                                  std::shared_ptr<const LoadedDocument> measured) {
  compareDocuments(std::move(predicted), std::move(measured),
                   {QStringLiteral("predicted"), QStringLiteral("measured")});
}

void MainWindow::compareDocuments(std::shared_ptr<const LoadedDocument> predicted,
                                  std::shared_ptr<const LoadedDocument> measured, std::pair<QString, QString> roles) {
  std::shared_ptr<const RunComparison> comparison;
  try {
    comparison = std::make_shared<const RunComparison>(predicted, measured);
  } catch (const core::InputError& error) {
    showError(QStringLiteral("Cannot compare"), QString::fromStdString(error.what()));
    return;
  }
  auto* view = new ComparisonView(comparison, tabs_, roles);
  view->splitter()->setSizes({height() * 3 / 8, height() * 3 / 8, height() / 4});
  const int index = tabs_->addTab(
      view,
      QStringLiteral("%1 vs %2").arg(QFileInfo(predicted->path).fileName(), QFileInfo(measured->path).fileName()));
  tabs_->setTabToolTip(index, predicted->path + QStringLiteral(" (predicted) vs ") + measured->path);
  tabs_->setCurrentIndex(index);
  statusBar()->showMessage(QStringLiteral("Comparing %1 with %2").arg(predicted->path, measured->path));
}

// Two open runs, the second the reference; defaults to the last two tabs opened.
void MainWindow::chooseComparison() {
  std::vector<std::shared_ptr<const LoadedDocument>> documents;
  for (int i = 0; i < tabs_->count(); ++i)
    if (const auto* view = qobject_cast<DocumentView*>(tabs_->widget(i))) documents.push_back(view->sharedDocument());
  if (documents.size() < 2) {
    showError(QStringLiteral("Compare"),
              QStringLiteral("Open two runs first (timelines or profiler traces), then compare them"));
    return;
  }
  QDialog dialog(this);
  dialog.setWindowTitle(QStringLiteral("Compare"));
  auto* form = new QFormLayout(&dialog);
  auto* predicted = new QComboBox(&dialog);
  auto* measured = new QComboBox(&dialog);
  for (const auto& document : documents) {
    predicted->addItem(QFileInfo(document->path).fileName());
    measured->addItem(QFileInfo(document->path).fileName());
  }
  predicted->setCurrentIndex(static_cast<int>(documents.size()) - 2);
  measured->setCurrentIndex(static_cast<int>(documents.size()) - 1);
  form->addRow(QStringLiteral("Predicted"), predicted);
  form->addRow(QStringLiteral("Measured (reference)"), measured);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, &dialog);
  form->addRow(buttons);
  connect(buttons, &QDialogButtonBox::accepted, &dialog, &QDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
  if (dialog.exec() != QDialog::Accepted) return;
  compareDocuments(documents[predicted->currentIndex()], documents[measured->currentIndex()]);
}

void MainWindow::addRecent(const QString& path) {
  const QString absolute = QFileInfo(path).absoluteFilePath();
  recent_.removeAll(absolute);
  recent_.prepend(absolute);
  while (recent_.size() > kRecentLimit) recent_.removeLast();
  rebuildRecentMenu();
  QSettings().setValue("recentFiles", recent_);
}

void MainWindow::rebuildRecentMenu() {
  recent_menu_->clear();
  for (const QString& path : recent_) recent_menu_->addAction(path, this, [this, path] { openFiles({path}); });
  recent_menu_->setEnabled(!recent_.isEmpty());
}

DocumentView* MainWindow::currentDocument() const { return qobject_cast<DocumentView*>(tabs_->currentWidget()); }

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
  if (event->mimeData()->hasUrls()) event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event) {
  QStringList paths;
  for (const QUrl& url : event->mimeData()->urls())
    if (url.isLocalFile()) paths << url.toLocalFile();
  event->acceptProposedAction();
  openFiles(paths);
}

void MainWindow::saveState() const {
  QSettings settings;
  settings.setValue("geometry", saveGeometry());
  settings.setValue("windowState", QMainWindow::saveState());
  if (const DocumentView* view = currentDocument()) {
    settings.setValue("splitter", view->splitter()->saveState());
    settings.setValue("panel", view->panels()->currentIndex());
  }
  settings.setValue("recentFiles", recent_);
}

void MainWindow::restoreState() {
  QSettings settings;
  recent_ = settings.value("recentFiles").toStringList();
  splitter_state_ = settings.value("splitter").toByteArray();
  panel_index_ = settings.value("panel", 0).toInt();
  QMainWindow::restoreState(settings.value("windowState").toByteArray());
  rebuildRecentMenu();
}

void MainWindow::closeEvent(QCloseEvent* event) {
  saveState();
  loader_.cancel();
  event->accept();
}

// ---- what-if ----

void MainWindow::newSimulation() {
  NewSimulationDialog dialog(this);
  if (dialog.exec() != QDialog::Accepted) return;
  try {
    startJob(StratsimJob::Kind::simulate, dialog.inputs());
  } catch (const core::InputError& error) {
    showError(QStringLiteral("Cannot simulate"), QString::fromStdString(error.what()));
  }
}

void MainWindow::startJob(StratsimJob::Kind kind, const WhatIfInputs& inputs,
                          std::shared_ptr<const LoadedDocument> beside) {
  if (job_ && job_->running()) {
    showError(QStringLiteral("Busy"), QStringLiteral("A run is in progress; wait for it or cancel it first"));
    return;
  }
  if (!work_dir_.isValid()) {
    showError(QStringLiteral("Cannot run"),
              QStringLiteral("no temporary folder for the run's files (%1)").arg(work_dir_.errorString()));
    return;
  }
  job_ = std::make_unique<StratsimJob>(kind, inputs, work_dir_.path());
  job_beside_ = std::move(beside);
  if (!job_progress_) {
    job_progress_ = new QProgressDialog(this);
    job_progress_->setRange(0, 100);
    job_progress_->setMinimumDuration(300);
    job_progress_->setAutoReset(false);
    job_progress_->setAutoClose(false);
    connect(job_progress_, &QProgressDialog::canceled, this, &MainWindow::cancelJob);
  }
  const bool simulate = kind == StratsimJob::Kind::simulate;
  job_progress_->setWindowTitle(simulate ? QStringLiteral("Simulating") : QStringLiteral("Running"));
  job_progress_->setLabelText(QStringLiteral("%1 %2 on %3 (%4)")
                                  .arg(simulate ? QStringLiteral("Simulating") : QStringLiteral("Running"),
                                       inputs.plan_label, simulate ? inputs.platform : QStringLiteral("this machine"),
                                       inputs.model));
  job_progress_->setValue(0);
  connect(job_.get(), &StratsimJob::progress, job_progress_, &QProgressDialog::setValue);
  connect(job_.get(), &StratsimJob::finished, this, &MainWindow::jobFinished);
  statusBar()->showMessage(job_progress_->labelText());
  job_->start();
}

void MainWindow::cancelJob() {
  if (!job_) return;
  disconnect(job_.get(), &StratsimJob::progress, job_progress_, nullptr);  // no late update reopens it
  job_->cancel();
}

void MainWindow::jobFinished(bool ok, const QString& error) {
  if (job_progress_) {
    job_progress_->reset();
    job_progress_->hide();  // autoClose is off (so Cancel is seen), hence hidden here
  }
  if (!job_) return;
  const std::shared_ptr<const LoadedDocument> beside = std::exchange(job_beside_, nullptr);
  if (job_->cancelled()) {
    statusBar()->showMessage(QStringLiteral("Cancelled"));
    return;
  }
  if (!ok) {
    showError(QStringLiteral("The run failed"), error);
    return;
  }
  const QString timeline = job_->timelinePath();
  what_if_[QFileInfo(timeline).absoluteFilePath()] = {job_->inputs(), job_->kind(), beside};
  openFiles({timeline});
}

// A what-if timeline just opened: its Plan panel, and beside the run it came from.
void MainWindow::attachWhatIf(DocumentView* view) {
  const auto it = what_if_.find(QFileInfo(view->document().path).absoluteFilePath());
  if (it == what_if_.end()) return;
  const PendingWhatIf pending = it->second;
  what_if_.erase(it);
  const auto document = view->sharedDocument();
  if (pending.kind == StratsimJob::Kind::simulate) {
    view->setWhatIf(pending.inputs);
    connect(view->planPanel(), &PlanPanel::rerunRequested, this,
            [this, document](const WhatIfInputs& edited) { startJob(StratsimJob::Kind::simulate, edited, document); });
    // A run of an edited plan has no simulation of that plan to stand beside: it opens alone.
    PlanPanel* panel = view->planPanel();
    connect(panel, &PlanPanel::runRequested, this, [this, document, panel](const WhatIfInputs& inputs) {
      startJob(StratsimJob::Kind::run, inputs, panel->fields()->edited() ? nullptr : document);
    });
  }
  if (!pending.beside) return;
  // After the tab itself is in place (loadFinished adds it first).
  QMetaObject::invokeMethod(
      this,
      [this, before = pending.beside, after = document, kind = pending.kind] {
        if (kind == StratsimJob::Kind::simulate)
          compareDocuments(before, after, {QStringLiteral("before"), QStringLiteral("after")});
        else compareDocuments(before, after, {QStringLiteral("simulated"), QStringLiteral("measured")});
      },
      Qt::QueuedConnection);
}

void MainWindow::waitForJob() {
  while ((job_ && job_->running()) || loading()) {
    QApplication::processEvents(QEventLoop::AllEvents, 50);
    if (loading()) waitForLoads();
    else QThread::msleep(10);
  }
  QApplication::processEvents();  // the queued comparison tab
}

}  // namespace stratsim::gui
