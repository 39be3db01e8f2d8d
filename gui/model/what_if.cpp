#include "model/what_if.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QRegularExpression>
#include <QSaveFile>
#include <QStandardPaths>
#include <QTimer>
#include <QUuid>

#include "stratsim/core/plan.hpp"

namespace stratsim::gui {
namespace {

using json = nlohmann::json;
using pointer = json::json_pointer;

QString text(const json& value) { return QString::fromStdString(value.dump()); }

// "/steps/0/fully_shard/mp_policy/param_dtype" from its parts, each escaped as RFC 6901 says.
pointer path_of(std::initializer_list<std::string> parts, const std::string& tail = "") {
  std::string out;
  const auto add = [&](std::string part) {
    std::string escaped;
    for (const char c : part) escaped += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
    out += "/" + escaped;
  };
  for (const std::string& part : parts) add(part);
  if (!tail.empty())
    for (std::size_t from = 0;;) {
      const std::size_t slash = tail.find('/', from);
      add(tail.substr(from, slash - from));
      if (slash == std::string::npos) break;
      from = slash + 1;
    }
  return pointer(out);
}

// FSDP2 is `fully_shard` from PyTorch 2.6 on (plan_io's rule).
bool fsdp2(const json& plan) {
  if (!plan.contains("torch_version") || !plan["torch_version"].is_string()) return false;
  const QStringList parts = QString::fromStdString(plan["torch_version"].get<std::string>()).split('.');
  const int major = parts.value(0).toInt(), minor = parts.value(1).toInt();
  return major > 2 || (major == 2 && minor >= 6);
}

// The settings a user most often changes, per call, with PyTorch's defaults.
std::vector<std::pair<std::string, json>> common_settings(const std::string& call, bool fsdp2_rules) {
  if (call == "replicate")
    return {{"bucket_cap_mb", 25},   {"gradient_as_bucket_view", false}, {"find_unused_parameters", false},
            {"static_graph", false}, {"broadcast_buffers", true},        {"comm_hook", nullptr}};
  if (call == "fully_shard" && fsdp2_rules)
    return {{"reshard_after_forward", true}, {"mp_policy/param_dtype", nullptr}, {"mp_policy/reduce_dtype", nullptr}};
  if (call == "fully_shard" || call == "FSDP" || call == "FullyShardedDataParallel")
    return {{"strategy", "FULL_SHARD"},
            {"backward_prefetch", "BACKWARD_PRE"},
            {"forward_prefetch", false},
            {"limit_all_gathers", true},
            {"mixed_precision/param_dtype", nullptr},
            {"mixed_precision/reduce_dtype", nullptr}};
  return {};
}

// Every leaf under `value` (objects walked, arrays kept whole: a mesh shape is one setting).
void leaves(const json& value, const std::string& prefix, std::vector<std::pair<std::string, json>>& out) {
  if (value.is_object() && !value.empty()) {
    for (const auto& [key, child] : value.items()) leaves(child, prefix.empty() ? key : prefix + "/" + key, out);
    return;
  }
  out.emplace_back(prefix, value);
}

}  // namespace

json planDocument(const QString& spec) { return core::plan_document(spec.toStdString()); }

QString stratsimBinary() {
  const QString configured = qEnvironmentVariable("STRATSIM_BINARY");
  if (!configured.isEmpty()) return configured;
  const QString beside = QDir(QCoreApplication::applicationDirPath()).filePath(QStringLiteral("stratsim"));
  if (QFileInfo(beside).isExecutable()) return beside;
  const QString on_path = QStandardPaths::findExecutable(QStringLiteral("stratsim"));
  return on_path.isEmpty() ? QStringLiteral("stratsim") : on_path;
}

namespace {

// What both commands take after their own options: the inputs, and where the timeline goes.
QStringList inputArguments(const WhatIfInputs& inputs, const QString& plan_file, const QString& timeline) {
  return {QStringLiteral("--model"),      inputs.model,
          QStringLiteral("--plan"),       plan_file,
          QStringLiteral("--iterations"), QString::number(inputs.iterations),
          QStringLiteral("--timeline"),   timeline,
          QStringLiteral("-o"),           QStringLiteral("/dev/null"),
          QStringLiteral("--progress")};
}

}  // namespace

QStringList simulateArguments(const WhatIfInputs& inputs, const QString& plan_file, const QString& timeline) {
  return QStringList{QStringLiteral("simulate"), QStringLiteral("--platform"), inputs.platform} +
         inputArguments(inputs, plan_file, timeline);
}

QStringList runArguments(const WhatIfInputs& inputs, const QString& plan_file, const QString& timeline) {
  return QStringList{QStringLiteral("run"), QStringLiteral("--backend"), QStringLiteral("gloo")} +
         inputArguments(inputs, plan_file, timeline);
}

// ---- StratsimJob ----

StratsimJob::StratsimJob(Kind kind, WhatIfInputs inputs, QString work_dir, QObject* parent)
    : QObject(parent), kind_(kind), inputs_(std::move(inputs)) {
  const QString stem = QDir(work_dir).filePath(QUuid::createUuid().toString(QUuid::WithoutBraces).left(8));
  plan_file_ = stem + QStringLiteral(".plan.json");
  timeline_ = stem + (kind == Kind::simulate ? QStringLiteral(".simulated.json") : QStringLiteral(".measured.json"));
  // A group of its own: Cancel signals the child and everything it started at once. Being in its
  // own group, the terminal's Ctrl+C no longer reaches it, so it is also told to stop (SIGTERM:
  // the launcher then stops its ranks) when the viewer dies without cleaning up.
  process_.setChildProcessModifier([] {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  });
  // The group is the child's pid; known from the moment it runs, so Cancel works however slowly
  // it started.
  connect(&process_, &QProcess::started, this, [this] {
    group_ = process_.processId();
    if (cancelled_) stopGroup();  // Cancel came while it was starting
  });
  connect(&process_, &QProcess::readyReadStandardError, this, &StratsimJob::readProgress);
  connect(&process_, &QProcess::finished, this, &StratsimJob::processFinished);
  connect(&process_, &QProcess::errorOccurred, this, [this](QProcess::ProcessError error) {
    if (error == QProcess::FailedToStart)
      emit finished(false, QStringLiteral("%1: cannot start (%2)").arg(process_.program(), process_.errorString()));
  });
}

StratsimJob::~StratsimJob() {
  if (!running()) return;
  disconnect(&process_, nullptr, this, nullptr);
  signalGroup(SIGKILL);
  process_.waitForFinished(5000);
}

void StratsimJob::start() {
  QSaveFile plan(plan_file_);
  if (!plan.open(QIODevice::WriteOnly) || plan.write(QByteArray::fromStdString(inputs_.plan.dump(2) + "\n")) < 0 ||
      !plan.commit()) {
    emit finished(false, QStringLiteral("%1: cannot write the plan (%2)").arg(plan_file_, plan.errorString()));
    return;
  }
  const QStringList arguments = kind_ == Kind::simulate ? simulateArguments(inputs_, plan_file_, timeline_)
                                                        : runArguments(inputs_, plan_file_, timeline_);
  process_.start(stratsimBinary(), arguments);
  // The child's own setpgid may not have run yet; made here too, so the group exists from now on.
  if (const qint64 pid = process_.processId(); pid > 0) {
    ::setpgid(static_cast<pid_t>(pid), static_cast<pid_t>(pid));
    group_ = pid;
  }
}

void StratsimJob::signalGroup(int signal) {
  const qint64 group = group_ > 0 ? group_ : process_.processId();
  if (group > 0) ::kill(static_cast<pid_t>(-group), signal);
}

// SIGTERM to the group, SIGKILL two seconds later if anything of it is left.
void StratsimJob::stopGroup() {
  signalGroup(SIGTERM);
  QTimer::singleShot(2000, this, [this] { signalGroup(SIGKILL); });
}

void StratsimJob::cancel() {
  if (!running() || cancelled_) return;
  cancelled_ = true;
  stopGroup();
}

// "\rsimulating [#####     ] 52% (...)": the last percentage in what has arrived; nothing once
// cancelled (a late update would bring the progress dialog back).
void StratsimJob::readProgress() {
  stderr_ += process_.readAllStandardError();
  if (cancelled_) return;
  static const QRegularExpression percent(QStringLiteral("(\\d+)% \\("));
  const QString tail = QString::fromUtf8(stderr_.right(200));
  int last = -1;
  for (auto it = percent.globalMatch(tail); it.hasNext();) last = it.next().captured(1).toInt();
  if (last >= 0) emit progress(last);
  if (stderr_.size() > (1 << 20)) stderr_ = stderr_.right(1 << 16);  // keep what the error line needs
}

void StratsimJob::processFinished(int code, QProcess::ExitStatus status) {
  stderr_ += process_.readAllStandardError();  // for the error line; no last progress flash
  // Whatever the child left behind in its group (a rank that outlived the launcher) goes too.
  signalGroup(SIGKILL);
  if (cancelled_) {
    emit finished(false, QString());
    return;
  }
  if (status == QProcess::NormalExit && code == 0) {
    emit finished(true, QString());
    return;
  }
  // The CLI's one line: "stratsim: error: FILE: FIELD: what was expected".
  QString error;
  for (const QString& line : QString::fromUtf8(stderr_).split(QRegularExpression(QStringLiteral("[\r\n]"))))
    if (line.startsWith(QLatin1String("stratsim: error: "))) error = line.mid(17);
  if (error.isEmpty())
    error = status == QProcess::NormalExit
                ? QStringLiteral("stratsim %1 failed with exit status %2")
                      .arg(kind_ == Kind::simulate ? "simulate" : "run")
                      .arg(code)
                : QStringLiteral("stratsim %1 crashed").arg(kind_ == Kind::simulate ? "simulate" : "run");
  emit finished(false, error);
}

// ---- PlanFieldsModel ----

PlanFieldsModel::PlanFieldsModel(QObject* parent) : QAbstractTableModel(parent) {}

void PlanFieldsModel::setPlan(json plan) {
  beginResetModel();
  plan_ = std::move(plan);
  edited_ = false;
  rebuild();
  endResetModel();
}

void PlanFieldsModel::rebuild() {
  fields_.clear();
  for (const char* key : {"world_size", "batch_size"})
    fields_.push_back({path_of({key}), QString::fromLatin1(key), json()});
  if (plan_.contains("mesh")) fields_.push_back({path_of({"mesh", "shape"}), QStringLiteral("mesh: shape"), json()});
  if (!plan_.contains("steps") || !plan_["steps"].is_array()) return;
  const bool fsdp2_rules = fsdp2(plan_);
  for (std::size_t i = 0; i < plan_["steps"].size(); ++i) {
    const json& step = plan_["steps"][i];
    if (!step.is_object() || step.size() != 1) continue;
    const std::string call = step.begin().key();
    const json& body = step.begin().value();
    const std::string index = std::to_string(i);
    const auto label = [&](const std::string& key) {
      return QStringLiteral("steps[%1] %2: %3").arg(i).arg(QString::fromStdString(call), QString::fromStdString(key));
    };
    std::vector<std::pair<std::string, json>> present;
    leaves(body, "", present);
    std::vector<std::string> shown;
    for (const auto& [key, value] : present) {
      if (key.empty() || key == "module") continue;
      fields_.push_back({path_of({"steps", index, call}, key), label(key), json()});
      shown.push_back(key);
    }
    for (const auto& [key, fallback] : common_settings(call, fsdp2_rules))
      if (std::find(shown.begin(), shown.end(), key) == shown.end())
        fields_.push_back({path_of({"steps", index, call}, key), label(key), fallback});
  }
}

int PlanFieldsModel::rowOf(const QString& setting) const {
  for (std::size_t i = 0; i < fields_.size(); ++i)
    if (fields_[i].label == setting) return static_cast<int>(i);
  return -1;
}

int PlanFieldsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(fields_.size());
}
int PlanFieldsModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : column_count; }

QVariant PlanFieldsModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount()) return {};
  const Field& field = fields_[static_cast<std::size_t>(index.row())];
  const bool present = plan_.contains(field.path);
  if (index.column() == setting) return role == Qt::DisplayRole ? QVariant(field.label) : QVariant();
  switch (role) {
    case Qt::DisplayRole:
      if (present) return text(plan_.at(field.path));
      return field.fallback.is_null() ? QStringLiteral("(default: none)")
                                      : QStringLiteral("(default: %1)").arg(text(field.fallback));
    case Qt::EditRole:
      return present ? text(plan_.at(field.path)) : QString();
    case Qt::ToolTipRole:
      return QStringLiteral("JSON: 25, true, \"FULL_SHARD\" (or FULL_SHARD), [2, 4]; empty for the default");
    default:
      return {};
  }
}

bool PlanFieldsModel::setData(const QModelIndex& index, const QVariant& value, int role) {
  if (!index.isValid() || index.column() != PlanFieldsModel::value || role != Qt::EditRole) return false;
  if (index.row() >= rowCount()) return false;
  const Field& field = fields_[static_cast<std::size_t>(index.row())];
  const QString entered = value.toString().trimmed();
  if (entered.isEmpty()) {
    if (!plan_.contains(field.path) || !plan_.at(field.path.parent_pointer()).is_object()) return false;
    plan_[field.path.parent_pointer()].erase(field.path.back());
  } else {
    // JSON when it parses as JSON, else the text as a string (FULL_SHARD, bfloat16).
    const json parsed = json::parse(entered.toStdString(), nullptr, false);
    try {
      plan_[field.path] = parsed.is_discarded() ? json(entered.toStdString()) : parsed;
    } catch (const json::exception&) {
      // The path runs through a value that is not an object (mixed_precision set to a string):
      // refused, and the plan stays as it was.
      return false;
    }
  }
  edited_ = true;
  // Rows can overlap (mixed_precision and mixed_precision/param_dtype): every value may have changed.
  emit dataChanged(this->index(0, PlanFieldsModel::value), this->index(rowCount() - 1, PlanFieldsModel::value));
  return true;
}

Qt::ItemFlags PlanFieldsModel::flags(const QModelIndex& index) const {
  if (!index.isValid()) return Qt::NoItemFlags;
  const Qt::ItemFlags base = Qt::ItemIsEnabled | Qt::ItemIsSelectable;
  return index.column() == value ? base | Qt::ItemIsEditable : base;
}

QVariant PlanFieldsModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  return section == setting ? QStringLiteral("setting") : section == value ? QStringLiteral("value") : QVariant();
}

}  // namespace stratsim::gui
