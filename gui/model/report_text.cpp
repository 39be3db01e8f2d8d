#include "model/report_text.hpp"

#include <QRegularExpression>
#include <QTextStream>

#include "model/table_models.hpp"
#include "model/viewport.hpp"

namespace stratsim::gui {
namespace {

// A model as an aligned text table, header first.
QString table(const QAbstractItemModel& model, const QString& indent = QStringLiteral("  ")) {
  const int columns = model.columnCount();
  std::vector<int> width(static_cast<std::size_t>(columns), 0);
  const auto cell = [&](int row, int column) {
    return row < 0 ? model.headerData(column, Qt::Horizontal).toString()
                   : model.data(model.index(row, column)).toString();
  };
  for (int row = -1; row < model.rowCount(); ++row)
    for (int c = 0; c < columns; ++c) width[c] = std::max<int>(width[c], static_cast<int>(cell(row, c).size()));
  QString out;
  for (int row = -1; row < model.rowCount(); ++row) {
    QString line = indent;
    for (int c = 0; c < columns; ++c) {
      const QString value = cell(row, c);
      line += c == 0 ? value.leftJustified(width[c]) : QStringLiteral("  ") + value.rightJustified(width[c]);
    }
    out += line.trimmed().isEmpty() ? QString() : line + '\n';
  }
  return out;
}

}  // namespace

std::optional<double> parseTime(const QString& text) {
  static const QRegularExpression pattern(
      QStringLiteral(R"(^\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(s|ms|us|µs|ns)?\s*$)"));
  const QRegularExpressionMatch match = pattern.match(text);
  if (!match.hasMatch()) return std::nullopt;
  const double value = match.captured(1).toDouble();
  const QString unit = match.captured(2);
  const double scale = unit == "ms"                                     ? 1e-3
                       : (unit == "us" || unit == QStringLiteral("µs")) ? 1e-6
                       : unit == "ns"                                   ? 1e-9
                                                                        : 1.0;
  return value * scale;
}

std::optional<std::pair<double, double>> parseRange(const QString& text) {
  const QStringList parts = text.split(':');
  if (parts.size() != 2) return std::nullopt;
  const auto begin = parseTime(parts[0]), end = parseTime(parts[1]);
  if (!begin || !end || !(*end > *begin)) return std::nullopt;
  return std::make_pair(*begin, *end);
}

QString reportText(const LoadedDocument& document, std::optional<std::pair<double, double>> range) {
  QString out;
  QTextStream stream(&out);
  stream << "stratsim-view report: " << document.path << '\n';
  if (!document.store) {
    if (document.summary) {
      stream << "run report: " << document.summary->title << '\n'
             << "  makespan " << formatTime(document.summary->makespan) << '\n';
      for (const auto& it : document.summary->iterations)
        stream << "  iteration " << it.index << ": step time " << formatTime(it.step_time) << '\n';
    }
    return out;
  }
  const TimelineStore& store = *document.store;
  const core::RunResult& result = store.result();
  stream << "run: " << QString::fromStdString(result.source) << ", " << QString::fromStdString(result.mode)
         << ", world size " << result.world_size << ", " << store.recordedRanks() << " recorded rank(s), makespan "
         << formatTime(store.makespan()) << '\n';
  RangeStatsModel stats;
  stats.setStore(document.store);
  stats.setRange(range);
  const auto [begin, end] = stats.range();
  stream << "\nrange " << formatTime(begin) << " .. " << formatTime(end) << " (" << formatTime(end - begin)
         << (range ? QString() : QStringLiteral(", the whole run")) << ")\n";
  stream << "per recorded rank (HTA definitions: overlap = |comm ∩ compute| / |comm|):\n" << table(stats);
  CountsModel counts;
  counts.setProgram(&store.program());
  stream << "\ncollective counts (CommDebugMode keys, per iteration):\n" << table(counts);
  return out;
}

}  // namespace stratsim::gui
