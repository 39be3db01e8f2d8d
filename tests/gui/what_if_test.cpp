// What-if from the desktop, as a person does it under Qt's offscreen platform: File > New
// simulation filled in and accepted, the new tab's Plan panel edited (DDP's bucket_cap_mb typed
// into the table) and re-run, the two runs opened side by side; the collective counts of the
// new run are the planner's for the edited plan. Then a real Gloo run of the same inputs, and
// Cancel of a simulation and of a run leaving no process behind.
#include <QAbstractItemModelTester>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QLineEdit>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QTabWidget>
#include <QTableView>
#include <QTemporaryDir>
#include <QtTest/QtTest>

#include <signal.h>

#include <cerrno>
#include <fstream>

#include "gui_support.hpp"
#include "stratsim/core/collective_counts.hpp"
#include "stratsim/core/json_reader.hpp"
#include "stratsim/core/model_io.hpp"
#include "stratsim/core/plan.hpp"
#include "stratsim/core/planner.hpp"
#include "widgets/comparison_view.hpp"
#include "widgets/document_view.hpp"
#include "widgets/main_window.hpp"
#include "widgets/timeline_view.hpp"
#include "widgets/what_if_widgets.hpp"

using namespace stratsim;
using namespace stratsim::gui;

namespace {

int collectives(const core::Program& program) {
  int n = 0;
  for (const core::ProgramOp& op : program.ops) n += op.type == core::OpType::collective;
  return n;
}

// What the planner says the plan gives: its collectives over the iterations.
int planned_collectives(const std::string& model, const nlohmann::json& plan, int iterations) {
  core::PlanOptions options;
  options.iterations = iterations;
  return collectives(
      core::plan_training(core::load_model(model), core::parse_plan(core::JsonReader(plan, "plan")), options).program);
}

// No process is left in the job's process group.
bool group_gone(qint64 group) { return ::kill(static_cast<pid_t>(-group), 0) == -1 && errno == ESRCH; }

}  // namespace

class WhatIfTest : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;

  std::unique_ptr<MainWindow> window() {
    auto w = std::make_unique<MainWindow>();
    w->resize(1400, 1000);
    w->show();
    if (!QTest::qWaitForWindowExposed(w.get())) qWarning("the window was not exposed");
    w->activateWindow();
    if (!QTest::qWaitForWindowActive(w.get())) qWarning("the window is not active");
    return w;
  }

  // The seed DDP plan on `platform`, every other input at its default.
  static WhatIfInputs ddp_on(const QString& platform) {
    WhatIfInputs inputs;
    inputs.plan = core::plan_document("builtin:ddp");
    inputs.platform = platform;
    return inputs;
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    test::isolate_settings(dir_, "what-if-test");
    qputenv("STRATSIM_BINARY", STRATSIM_BINARY);
  }

  void aNewSimulationThenAnEditedBucketCapReRunsBesideIt() {
    auto w = window();
    // File > New simulation: the dialog filled in as a person would, then Simulate.
    QTimer::singleShot(0, this, [] {
      auto* dialog = qobject_cast<NewSimulationDialog*>(QApplication::activeModalWidget());
      QVERIFY(dialog);
      dialog->modelBox()->setCurrentText("zoo:Net");
      dialog->planBox()->setCurrentText("builtin:ddp");
      dialog->platformBox()->setCurrentText("h100");
      dialog->iterationsBox()->setValue(2);
      QTest::mouseClick(dialog->findChild<QDialogButtonBox*>()->button(QDialogButtonBox::Ok), Qt::LeftButton);
    });
    w->newSimulation();
    w->waitForJob();
    QVERIFY2(w->lastError().isEmpty(), qPrintable(w->lastError()));
    QCOMPARE(w->tabs()->count(), 1);
    auto* first = qobject_cast<DocumentView*>(w->tabs()->widget(0));
    QVERIFY(first && first->planPanel());
    const int before = collectives(first->timeline()->store()->program());
    QCOMPARE(before, planned_collectives("zoo:Net", core::plan_document("builtin:ddp"), 2));

    // The Plan panel: DDP's bucket cap typed into its row, then Re-run.
    PlanPanel* panel = first->planPanel();
    first->panels()->setCurrentWidget(panel);
    const int row = panel->fields()->rowOf("steps[0] replicate: bucket_cap_mb");
    QVERIFY(row >= 0);
    QCOMPARE(panel->fields()->index(row, PlanFieldsModel::value).data().toString(), QStringLiteral("(default: 25)"));
    QTableView* table = panel->table();
    const QModelIndex cell = table->model()->index(row, PlanFieldsModel::value);
    // select the cell, then type: the first key opens the editor with it
    QTest::mouseClick(table->viewport(), Qt::LeftButton, Qt::NoModifier, table->visualRect(cell).center());
    QCOMPARE(table->currentIndex(), cell);
    QTest::keyClicks(table, "5");
    auto* editor = table->viewport()->findChild<QLineEdit*>();  // typing on a selected value opens its editor
    QVERIFY(editor);
    QCOMPARE(editor->text(), QStringLiteral("5"));
    QTest::keyClick(editor, Qt::Key_Enter);  // the delegate commits on its next event-loop turn
    const nlohmann::json::json_pointer cap("/steps/0/replicate/bucket_cap_mb");
    QTRY_VERIFY(panel->fields()->plan().contains(cap));
    QCOMPARE(panel->fields()->plan().at(cap), nlohmann::json(5));
    QTest::mouseClick(panel->rerunButton(), Qt::LeftButton);
    w->waitForJob();
    QVERIFY2(w->lastError().isEmpty(), qPrintable(w->lastError()));

    // The new run in a tab of its own, then both side by side.
    QCOMPARE(w->tabs()->count(), 3);
    auto* second = qobject_cast<DocumentView*>(w->tabs()->widget(1));
    QVERIFY(second && second->planPanel());
    QVERIFY(second->planPanel()->original().plan_label.endsWith(" (edited)"));
    const int after = collectives(second->timeline()->store()->program());
    QCOMPARE(after, planned_collectives("zoo:Net", panel->fields()->plan(), 2));
    QVERIFY2(after > before, "5 MiB buckets: more all-reduces than 25 MiB ones");
    auto* comparison = qobject_cast<ComparisonView*>(w->tabs()->widget(2));
    QVERIFY(comparison);
    QCOMPARE(w->tabs()->currentWidget(), static_cast<QWidget*>(comparison));
    QCOMPARE(comparison->comparison().predictedStore(), first->sharedDocument()->store);  // before | after
    QCOMPARE(comparison->comparison().measuredStore(), second->sharedDocument()->store);
    QVERIFY(!comparison->comparison().result().unmatched.empty());  // the bucket all-reduces differ

    // Save plan as: the edited plan, as JSON the planner reads.
    const QString saved = dir_.filePath("edited.plan.json");
    QVERIFY(panel->savePlan(saved));
    QCOMPARE(core::load_document(saved.toStdString())["steps"][0]["replicate"]["bucket_cap_mb"], nlohmann::json(5));
  }

  // The plan's fields under Qt's model tester; an edit through a value that is not an object
  // (mixed_precision set to a word) is refused, not thrown out of the event loop.
  void thePlanFieldsModelEditsValuesAndRefusesImpossiblePaths() {
    PlanFieldsModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setPlan(nlohmann::json::parse(
        R"({"world_size": 4, "steps": [{"fully_shard": {"module": "", "mixed_precision": "bf16"}},
                                        {"parallelize_module": {"module": "", "plan": {"fc1": "colwise"}}}]})"));
    const int style = model.rowOf("steps[1] parallelize_module: plan/fc1");
    QVERIFY(style >= 0);
    QCOMPARE(model.index(style, PlanFieldsModel::value).data().toString(), QStringLiteral("\"colwise\""));
    QSignalSpy changed(&model, &QAbstractItemModel::dataChanged);
    QVERIFY(model.setData(model.index(style, PlanFieldsModel::value), "rowwise"));
    // rows overlap (a value and the settings under it), so every value row is said to have changed
    QCOMPARE(changed.count(), 1);
    QCOMPARE(changed[0][0].toModelIndex().row(), 0);
    QCOMPARE(changed[0][1].toModelIndex().row(), model.rowCount() - 1);
    QCOMPARE(model.plan()["steps"][1]["parallelize_module"]["plan"]["fc1"], nlohmann::json("rowwise"));
    const int dtype = model.rowOf("steps[0] fully_shard: mixed_precision/param_dtype");
    QVERIFY(dtype >= 0);
    QVERIFY(!model.setData(model.index(dtype, PlanFieldsModel::value), "bfloat16"));
    QCOMPARE(model.plan()["steps"][0]["fully_shard"]["mixed_precision"], nlohmann::json("bf16"));
    // empty restores the default: the key goes
    const int prefetch = model.rowOf("steps[0] fully_shard: backward_prefetch");
    QVERIFY(model.setData(model.index(prefetch, PlanFieldsModel::value), "BACKWARD_POST"));
    QVERIFY(model.setData(model.index(prefetch, PlanFieldsModel::value), ""));
    QVERIFY(!model.plan()["steps"][0]["fully_shard"].contains("backward_prefetch"));
    QVERIFY(model.edited());
  }

  void aPlanTheSimulatorRefusesSaysSoInTheCliWords() {
    auto w = window();
    w->startJob(StratsimJob::Kind::simulate, ddp_on("nosuch"));
    w->waitForJob();
    QCOMPARE(w->tabs()->count(), 0);
    QCOMPARE(w->lastError(), QStringLiteral("unknown platform preset \"nosuch\" (known: a100, h100, h200, cpu)"));
  }

  void runOnThisMachineOpensTheMeasuredRunBesideTheSimulation() {
    auto w = window();
    w->startJob(StratsimJob::Kind::simulate, ddp_on("cpu:procs=2"));
    w->waitForJob();
    auto* simulated = qobject_cast<DocumentView*>(w->tabs()->widget(0));
    QVERIFY(simulated && simulated->planPanel());
    QTest::mouseClick(simulated->planPanel()->runButton(), Qt::LeftButton);
    QVERIFY(w->job() && w->job()->kind() == StratsimJob::Kind::run);
    QTRY_VERIFY(w->job()->processId() > 0);
    const qint64 group = w->job()->processId();
    w->waitForJob();
    QVERIFY2(w->lastError().isEmpty(), qPrintable(w->lastError()));
    QCOMPARE(w->tabs()->count(), 3);
    auto* comparison = qobject_cast<ComparisonView*>(w->tabs()->widget(2));
    QVERIFY(comparison);
    QCOMPARE(comparison->comparison().measuredStore()->result().source, std::string("gloo"));
    QCOMPARE(comparison->comparison().result().matched.size(), std::size_t{16});  // SimpleMLP DDP, 2 ranks x 8
    QVERIFY(comparison->comparison().result().unmatched.empty());
    QVERIFY(group_gone(group));
  }

  void cancelStopsTheChildAndEveryProcessItStarted() {
    auto w = window();
    WhatIfInputs inputs = ddp_on(WhatIfInputs{}.platform);
    inputs.model = "zoo:Net";  // 4 x Linear(2000, 2000): a real run long enough to cancel
    inputs.iterations = 1000;
    w->startJob(StratsimJob::Kind::run, inputs);
    QVERIFY(w->job() && w->job()->running());
    QTRY_VERIFY(w->job()->processId() > 0);
    const qint64 group = w->job()->processId();
    QTest::qWait(1500);  // the launcher has started its ranks
    w->cancelJob();
    w->waitForJob();
    QVERIFY2(w->job()->cancelled(), qPrintable(w->lastError()));
    QCOMPARE(w->tabs()->count(), 0);
    QTRY_VERIFY_WITH_TIMEOUT(group_gone(group), 5000);
  }
};

QTEST_MAIN(WhatIfTest)
#include "what_if_test.moc"
