#include "widgets/what_if_widgets.hpp"

#include <QComboBox>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMessageBox>
#include <QProcess>
#include <QPushButton>
#include <QRegularExpression>
#include <QSaveFile>
#include <QSpinBox>
#include <QTableView>
#include <QVBoxLayout>

#include "stratsim/core/errors.hpp"
#include "stratsim/core/model_io.hpp"
#include "stratsim/core/plan.hpp"

namespace stratsim::gui {
namespace {

// The simulator's presets, as `stratsim platforms` lists them (the viewer does not link the
// simulator); the four shipped ones if it cannot be asked. Asked once per process, not each time
// the dialog opens.
QStringList ask_platform_presets() {
  QProcess process;
  process.start(stratsimBinary(), {QStringLiteral("platforms")});
  QStringList names;
  if (process.waitForFinished(10000) && process.exitCode() == 0) {
    static const QRegularExpression entry(QStringLiteral("^  (\\S+)\\s{2,}"));
    for (const QString& line : QString::fromUtf8(process.readAllStandardOutput()).split('\n'))
      if (const auto match = entry.match(line); match.hasMatch()) names << match.captured(1);
  }
  return names.isEmpty() ? QStringList{"h100", "a100", "h200", "cpu"} : names;
}

const QStringList& platform_presets() {
  static const QStringList presets = ask_platform_presets();
  return presets;
}

QComboBox* editable_box(const QStringList& items, const QString& current, QWidget* parent) {
  auto* box = new QComboBox(parent);
  box->setEditable(true);
  box->addItems(items);
  box->setCurrentText(current);
  box->setMinimumContentsLength(28);
  return box;
}

QWidget* with_browse(QComboBox* box, QPushButton* browse, QWidget* parent) {
  auto* row = new QWidget(parent);
  auto* layout = new QHBoxLayout(row);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(box, 1);
  layout->addWidget(browse);
  return row;
}

}  // namespace

// ---- NewSimulationDialog ----

NewSimulationDialog::NewSimulationDialog(QWidget* parent) : QDialog(parent) {
  setWindowTitle(QStringLiteral("New simulation"));
  auto* form = new QFormLayout(this);
  QStringList zoo;
  for (const core::ZooEntry& entry : core::zoo()) zoo << QStringLiteral("zoo:") + QString::fromStdString(entry.name);
  QStringList plans;
  for (const std::string& name : core::builtin_plan_names())
    plans << QStringLiteral("builtin:") + QString::fromStdString(name);
  model_ = editable_box(zoo, QStringLiteral("zoo:SimpleMLP"), this);
  plan_ = editable_box(plans, QStringLiteral("builtin:ddp"), this);
  platform_ = editable_box(platform_presets(), QStringLiteral("h100"), this);
  platform_->setToolTip(
      QStringLiteral("A preset with options (h100:nodes=2,gpus=8), or a SimGrid .xml or .json/.yaml file"));
  model_->setToolTip(QStringLiteral("zoo:NAME[:key=value,...] or a model file (JSON/YAML)"));
  iterations_ = new QSpinBox(this);
  iterations_->setRange(1, 1000);
  iterations_->setValue(3);
  auto* browse_model = new QPushButton(QStringLiteral("File..."), this);
  auto* browse_plan = new QPushButton(QStringLiteral("File..."), this);
  auto* browse_platform = new QPushButton(QStringLiteral("File..."), this);
  connect(browse_model, &QPushButton::clicked, this,
          [this] { browse(model_, QStringLiteral("Models (*.json *.yaml *.yml)")); });
  connect(browse_plan, &QPushButton::clicked, this,
          [this] { browse(plan_, QStringLiteral("Plans (*.json *.yaml *.yml)")); });
  connect(browse_platform, &QPushButton::clicked, this,
          [this] { browse(platform_, QStringLiteral("Platforms (*.xml *.json *.yaml *.yml)")); });
  form->addRow(QStringLiteral("Model"), with_browse(model_, browse_model, this));
  form->addRow(QStringLiteral("Plan"), with_browse(plan_, browse_plan, this));
  form->addRow(QStringLiteral("Platform"), with_browse(platform_, browse_platform, this));
  form->addRow(QStringLiteral("Iterations"), iterations_);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
  buttons->button(QDialogButtonBox::Ok)->setText(QStringLiteral("Simulate"));
  form->addRow(buttons);
  connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
}

void NewSimulationDialog::browse(QComboBox* box, const QString& filter) {
  const QString path = QFileDialog::getOpenFileName(this, QStringLiteral("Choose a file"), QString(), filter);
  if (!path.isEmpty()) box->setCurrentText(path);
}

WhatIfInputs NewSimulationDialog::inputs() const {
  WhatIfInputs inputs;
  inputs.model = model_->currentText().trimmed();
  inputs.plan_label = plan_->currentText().trimmed();
  inputs.plan = planDocument(inputs.plan_label);
  inputs.platform = platform_->currentText().trimmed();
  inputs.iterations = iterations_->value();
  return inputs;
}

// ---- PlanPanel ----

PlanPanel::PlanPanel(WhatIfInputs inputs, QWidget* parent) : QWidget(parent), inputs_(std::move(inputs)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  auto* header = new QLabel(QStringLiteral("%1 on %2 (model %3, %4 iterations). Edit a value (JSON; empty for the "
                                           "default), then Re-run: the new run opens beside this one.")
                                .arg(inputs_.plan_label, inputs_.platform, inputs_.model)
                                .arg(inputs_.iterations),
                            this);
  header->setWordWrap(true);
  layout->addWidget(header);
  fields_ = new PlanFieldsModel(this);
  fields_->setPlan(inputs_.plan);
  table_ = new QTableView(this);
  table_->setModel(fields_);
  table_->verticalHeader()->hide();
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->setEditTriggers(QAbstractItemView::DoubleClicked | QAbstractItemView::EditKeyPressed |
                          QAbstractItemView::AnyKeyPressed);
  layout->addWidget(table_, 1);
  auto* buttons = new QHBoxLayout;
  rerun_ = new QPushButton(QStringLiteral("Re-run"), this);
  save_ = new QPushButton(QStringLiteral("Save plan as..."), this);
  run_ = new QPushButton(QStringLiteral("Run on this machine (Gloo)"), this);
  run_->setToolTip(QStringLiteral("stratsim run with the same model, plan and iterations: one process per rank"));
  status_ = new QLabel(this);
  buttons->addWidget(rerun_);
  buttons->addWidget(save_);
  buttons->addWidget(run_);
  buttons->addWidget(status_, 1);
  layout->addLayout(buttons);
  connect(rerun_, &QPushButton::clicked, this, [this] { emit rerunRequested(edited()); });
  connect(run_, &QPushButton::clicked, this, [this] { emit runRequested(edited()); });
  connect(save_, &QPushButton::clicked, this, [this] {
    const QString path = QFileDialog::getSaveFileName(this, QStringLiteral("Save plan as"), QStringLiteral("plan.json"),
                                                      QStringLiteral("Plans (*.json)"));
    if (!path.isEmpty()) savePlan(path);
  });
  connect(fields_, &QAbstractItemModel::dataChanged, this,
          [this] { status_->setText(QStringLiteral("edited: Re-run to simulate the change")); });
}

WhatIfInputs PlanPanel::edited() const {
  WhatIfInputs out = inputs_;
  out.plan = fields_->plan();
  if (fields_->edited() && !out.plan_label.endsWith(QLatin1String(" (edited)")))
    out.plan_label += QStringLiteral(" (edited)");
  return out;
}

bool PlanPanel::savePlan(const QString& path) {
  QSaveFile file(path);
  const bool saved = file.open(QIODevice::WriteOnly) &&
                     file.write(QByteArray::fromStdString(fields_->plan().dump(2) + "\n")) >= 0 && file.commit();
  status_->setText(saved ? QStringLiteral("saved %1").arg(path)
                         : QStringLiteral("%1: cannot write (%2)").arg(path, file.errorString()));
  return saved;
}

}  // namespace stratsim::gui
