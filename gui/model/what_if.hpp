// What-if runs from the desktop: the inputs of a simulation (model, plan document, platform,
// iterations), the plan's settings as an editable table, and the `stratsim` child process that
// simulates or runs them. The viewer reads timelines and never links the simulator or the
// executor: a run is `stratsim simulate` / `stratsim run` in a child process, as a user would type
// it, whose timeline then opens like any file. No widgets here.
#pragma once

#include <QAbstractTableModel>
#include <QByteArray>
#include <QObject>
#include <QProcess>
#include <QString>
#include <QStringList>

#include <nlohmann/json.hpp>

#include <vector>

namespace stratsim::gui {

struct WhatIfInputs {
  QString model = QStringLiteral("zoo:SimpleMLP");     // a model file or zoo:NAME[:key=value,...]
  nlohmann::json plan;                                 // the plan document
  QString plan_label = QStringLiteral("builtin:ddp");  // where it came from: "builtin:ddp", "plan.yaml", "... (edited)"
  QString platform = QStringLiteral("h100");           // preset[:key=value,...] or a platform file
  int iterations = 3;
};

// The plan document of a spec (a file or builtin:NAME), read by core; throws core::InputError.
nlohmann::json planDocument(const QString& spec);

// The stratsim binary: $STRATSIM_BINARY, else `stratsim` beside this program, else on the PATH.
QString stratsimBinary();

// The command lines, with the plan written to `plan_file` beforehand by the caller.
QStringList simulateArguments(const WhatIfInputs& inputs, const QString& plan_file, const QString& timeline);
QStringList runArguments(const WhatIfInputs& inputs, const QString& plan_file, const QString& timeline);

// A `stratsim simulate` or `stratsim run` child in a process group of its own, so Cancel stops it
// and every process it started (the simulator's worker, the ranks of a run): SIGTERM to the group,
// SIGKILL two seconds later. The progress bar it draws (--progress) becomes progress(percent); a
// failure is its one `stratsim: error:` line.
class StratsimJob : public QObject {
  Q_OBJECT
 public:
  enum class Kind { simulate, run };
  StratsimJob(Kind kind, WhatIfInputs inputs, QString work_dir, QObject* parent = nullptr);
  ~StratsimJob() override;  // a job still running is killed, its group with it

  void start();
  void cancel();
  bool running() const { return process_.state() != QProcess::NotRunning; }
  Kind kind() const { return kind_; }
  const WhatIfInputs& inputs() const { return inputs_; }
  QString timelinePath() const { return timeline_; }
  qint64 processId() const { return process_.processId(); }
  bool cancelled() const { return cancelled_; }

 signals:
  void progress(int percent);
  // ok: the timeline is at timelinePath(); else `error` says why (empty when cancelled).
  void finished(bool ok, const QString& error);

 private:
  void readProgress();
  void processFinished(int code, QProcess::ExitStatus status);
  void signalGroup(int signal);
  void stopGroup();

  Kind kind_;
  WhatIfInputs inputs_;
  QString plan_file_, timeline_;
  QProcess process_;
  QByteArray stderr_;
  qint64 group_ = 0;
  bool cancelled_ = false;
};

// The plan's settings as (setting, value) rows: every value the plan sets, and the settings a user
// most often changes with PyTorch's defaults where the plan leaves them out (bucket_cap_mb,
// sharding strategy, prefetch, mixed precision, mesh shape, tensor-parallel styles). A value is
// edited as JSON (a bare word is taken as a string); an empty value goes back to the default.
class PlanFieldsModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { setting, value, column_count };
  explicit PlanFieldsModel(QObject* parent = nullptr);

  void setPlan(nlohmann::json plan);
  const nlohmann::json& plan() const { return plan_; }  // with the edits
  bool edited() const { return edited_; }
  int rowOf(const QString& setting) const;  // -1 when absent

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;
  Qt::ItemFlags flags(const QModelIndex& index) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  struct Field {
    nlohmann::json::json_pointer path;
    QString label;            // "steps[0] replicate: bucket_cap_mb"
    nlohmann::json fallback;  // PyTorch's default, shown while the plan leaves it out
  };
  void rebuild();
  nlohmann::json plan_;
  std::vector<Field> fields_;
  bool edited_ = false;
};

}  // namespace stratsim::gui
