// The what-if widgets: File > New simulation's dialog (a model from the zoo or a file, a plan
// built in or from a file, a platform preset with its options or a file, iterations) and the Plan
// panel of a tab that came from one (the plan's settings as editable fields, Re-run, Save plan as,
// Run on this machine). Both hand WhatIfInputs to the main window, which runs them
// (model/what_if.hpp's StratsimJob).
#pragma once

#include <QDialog>
#include <QWidget>

#include "model/what_if.hpp"

class QComboBox;
class QSpinBox;
class QTableView;
class QPushButton;
class QLabel;

namespace stratsim::gui {

class NewSimulationDialog : public QDialog {
  Q_OBJECT
 public:
  explicit NewSimulationDialog(QWidget* parent = nullptr);
  QComboBox* modelBox() const { return model_; }
  QComboBox* planBox() const { return plan_; }
  QComboBox* platformBox() const { return platform_; }
  QSpinBox* iterationsBox() const { return iterations_; }
  // What the fields say; throws core::InputError for a plan that cannot be read.
  WhatIfInputs inputs() const;

 private:
  void browse(QComboBox* box, const QString& filter);
  QComboBox* model_ = nullptr;
  QComboBox* plan_ = nullptr;
  QComboBox* platform_ = nullptr;
  QSpinBox* iterations_ = nullptr;
};

class PlanPanel : public QWidget {
  Q_OBJECT
 public:
  explicit PlanPanel(WhatIfInputs inputs, QWidget* parent = nullptr);
  const WhatIfInputs& original() const { return inputs_; }
  WhatIfInputs edited() const;  // the inputs with the table's edits
  PlanFieldsModel* fields() const { return fields_; }
  QTableView* table() const { return table_; }
  QPushButton* rerunButton() const { return rerun_; }
  QPushButton* saveButton() const { return save_; }
  QPushButton* runButton() const { return run_; }
  bool savePlan(const QString& path);  // JSON, atomically; false (and a message) when it cannot

 signals:
  void rerunRequested(const stratsim::gui::WhatIfInputs& inputs);
  void runRequested(const stratsim::gui::WhatIfInputs& inputs);

 private:
  WhatIfInputs inputs_;
  PlanFieldsModel* fields_ = nullptr;
  QTableView* table_ = nullptr;
  QPushButton* rerun_ = nullptr;
  QPushButton* save_ = nullptr;
  QPushButton* run_ = nullptr;
  QLabel* status_ = nullptr;
};

}  // namespace stratsim::gui
