#include "widgets/panels.hpp"

#include <QHBoxLayout>
#include <QKeyEvent>
#include <QLabel>
#include <QLocale>
#include <QPainter>
#include <QToolButton>

#include <algorithm>

#include "model/op_details.hpp"
#include "model/table_models.hpp"
#include "model/viewport.hpp"
#include "widgets/timeline_view.hpp"

namespace stratsim::gui {

// ---- DetailsPanel ----

DetailsPanel::DetailsPanel(QWidget* parent) : QTextBrowser(parent) {
  setOpenLinks(false);
  setPlaceholderText(QStringLiteral("Click an op to see its details."));
  connect(this, &QTextBrowser::anchorClicked, this, [this](const QUrl& url) {
    // op:RECORDED:ID
    const QStringList parts = url.toString().split(':');
    if (parts.size() == 3 && parts[0] == QStringLiteral("op")) emit opActivated({parts[1].toInt(), parts[2].toInt()});
  });
}

void DetailsPanel::setStore(std::shared_ptr<const TimelineStore> store) {
  store_ = std::move(store);
  clear();
}

void DetailsPanel::showOp(OpRef op) {
  if (!store_ || !op.valid()) {
    clear();
    return;
  }
  const OpDetails details = opDetails(*store_, op);
  QString html = QStringLiteral("<h3>%1</h3><table cellspacing=2>").arg(details.title.toHtmlEscaped());
  for (const DetailField& field : details.fields)
    html += QStringLiteral("<tr><td><i>%1</i></td><td>%2</td></tr>")
                .arg(field.name.toHtmlEscaped(), field.value.toHtmlEscaped());
  html += QStringLiteral("</table>");
  const auto links = [&](const char* title, const std::vector<OpRef>& ops) {
    if (ops.empty()) return;
    html += QStringLiteral("<p><b>%1</b><br>").arg(QString::fromLatin1(title));
    for (OpRef ref : ops)
      html += QStringLiteral("<a href=\"op:%1:%2\">%3</a><br>")
                  .arg(ref.recorded)
                  .arg(ref.op)
                  .arg(QString::fromStdString(store_->op(ref).name).toHtmlEscaped());
    html += QStringLiteral("</p>");
  };
  links("depends on", details.dependencies);
  links("needed by", details.dependants);
  setHtml(html);
}

// ---- FindBar ----

FindBar::FindBar(QWidget* parent) : QWidget(parent), field_(new QLineEdit(this)), count_(new QLabel(this)) {
  auto* row = new QHBoxLayout(this);
  row->setContentsMargins(4, 2, 4, 2);
  row->addWidget(new QLabel(QStringLiteral("Find:"), this));
  field_->setPlaceholderText(QStringLiteral("op name, module or collective kind (Enter: next, Shift+Enter: previous)"));
  row->addWidget(field_, 1);
  auto* previous = new QToolButton(this);
  previous->setText(QStringLiteral("◀"));
  auto* next = new QToolButton(this);
  next->setText(QStringLiteral("▶"));
  row->addWidget(previous);
  row->addWidget(next);
  row->addWidget(count_);
  connect(field_, &QLineEdit::textChanged, this, &FindBar::search);
  connect(previous, &QToolButton::clicked, this, [this] { step(-1); });
  connect(next, &QToolButton::clicked, this, [this] { step(1); });
  hide();
}

void FindBar::setStore(std::shared_ptr<const TimelineStore> store) {
  store_ = std::move(store);
  search();
}

void FindBar::activate() {
  show();
  field_->setFocus(Qt::ShortcutFocusReason);
  field_->selectAll();
}

void FindBar::search() {
  matches_ = store_ ? store_->find(field_->text()) : std::vector<OpRef>{};
  current_ = -1;
  count_->setText(field_->text().isEmpty() ? QString() : QStringLiteral("%1 matches").arg(matches_.size()));
  emit matchesChanged(matches_);
}

void FindBar::step(int direction) {
  if (matches_.empty()) return;
  const int n = static_cast<int>(matches_.size());
  current_ = current_ < 0 ? (direction > 0 ? 0 : n - 1) : (current_ + direction + n) % n;
  count_->setText(QStringLiteral("%1 of %2").arg(current_ + 1).arg(n));
  emit matchSelected(matches_[static_cast<std::size_t>(current_)]);
}

void FindBar::keyPressEvent(QKeyEvent* event) {
  if (event->key() == Qt::Key_Return || event->key() == Qt::Key_Enter) {
    step(event->modifiers() & Qt::ShiftModifier ? -1 : 1);
  } else if (event->key() == Qt::Key_Escape) {
    hide();
  } else {
    QWidget::keyPressEvent(event);
  }
}

// ---- SummaryCharts ----

SummaryCharts::SummaryCharts(QWidget* parent) : QWidget(parent) { setMinimumSize(500, 400); }

void SummaryCharts::setSummary(SummaryData summary) {
  summary_ = std::move(summary);
  update();
}

void SummaryCharts::paintEvent(QPaintEvent*) {
  QPainter p(this);
  render(p, size());
}

namespace {

struct Bar {
  QString label;
  double value = 0;
  QString text;
};

// A horizontal bar chart in `area`: title, one bar per item scaled to the largest.
void barChart(QPainter& p, QRect area, const QString& title, const std::vector<Bar>& bars, const QColor& color) {
  p.setPen(Qt::black);
  QFont bold = p.font();
  bold.setBold(true);
  p.save();
  p.setFont(bold);
  p.drawText(area.left(), area.top() + 14, title);
  p.restore();
  const int shown = std::min<int>(static_cast<int>(bars.size()), std::max(1, (area.height() - 22) / 18));
  double largest = 0;
  for (int i = 0; i < shown; ++i) largest = std::max(largest, bars[i].value);
  // The value text after each bar gets the room its widest needs, so no bar pushes it past the edge.
  int text_width = 40;
  for (int i = 0; i < shown; ++i)
    text_width = std::max(text_width, p.fontMetrics().horizontalAdvance(bars[i].text) + 8);
  const int label_width = 150;
  text_width = std::min(text_width, std::max(40, area.width() - label_width - 40));
  const int bar_width = std::max(10, area.width() - label_width - text_width);
  for (int i = 0; i < shown; ++i) {
    const int y = area.top() + 22 + i * 18;
    p.setPen(Qt::black);
    p.drawText(QRect(area.left(), y, label_width - 6, 16), Qt::AlignVCenter | Qt::AlignLeft | Qt::TextSingleLine,
               p.fontMetrics().elidedText(bars[i].label, Qt::ElideMiddle, label_width - 6));
    const int length = largest > 0 ? static_cast<int>(bar_width * bars[i].value / largest) : 0;
    p.fillRect(QRect(area.left() + label_width, y + 2, std::max(1, length), 12), color);
    p.drawText(QRect(area.left() + label_width + length + 4, y, text_width, 16), Qt::AlignVCenter | Qt::AlignLeft,
               bars[i].text);
  }
  if (static_cast<int>(bars.size()) > shown)
    p.drawText(area.left(), area.top() + 22 + shown * 18 + 12, QStringLiteral("... %1 more").arg(bars.size() - shown));
}

}  // namespace

void SummaryCharts::render(QPainter& p, QSize size) const {
  p.fillRect(QRect(QPoint(0, 0), size), Qt::white);
  p.setPen(Qt::black);
  p.drawText(QRect(10, 6, size.width() - 20, 18), Qt::AlignLeft | Qt::AlignVCenter,
             QStringLiteral("%1 — makespan %2").arg(summary_.title, formatTime(summary_.makespan)));
  p.drawText(QRect(10, 24, size.width() - 20, 18), Qt::AlignLeft | Qt::AlignVCenter, summary_.platform);
  const int half = (size.width() - 30) / 2;
  // Each chart as tall as its bars need (at most kChartRows rows), the collectives table below.
  constexpr int kChartRows = 8;
  const auto chart_height = [](std::size_t bars) {
    return 34 + 18 * static_cast<int>(std::min<std::size_t>(bars, kChartRows));
  };
  std::vector<Bar> steps;
  for (const auto& it : summary_.iterations) {
    QString text = formatTime(it.step_time);
    if (it.samples_per_second > 0)
      text += QStringLiteral(", %1 samples/s").arg(QLocale(QLocale::English).toString(it.samples_per_second, 'f', 0));
    steps.push_back({QStringLiteral("iteration %1").arg(it.index), it.step_time, text});
  }
  std::vector<Bar> overlap, exposed;
  for (const auto& r : summary_.ranks) {
    // r.label is "3", "0-1023" or "0-3,8-11": one rank reads "rank 3"
    const bool several = r.label.contains('-') || r.label.contains(',');
    const QString label = QStringLiteral("%1 %2").arg(several ? "ranks" : "rank", r.label);
    overlap.push_back({label, r.overlap, QString::number(100 * r.overlap, 'f', 1) + " %"});
    exposed.push_back({label, r.exposed, formatTime(r.exposed)});
  }
  std::vector<Bar> links;
  for (const auto& link : summary_.links)
    links.push_back({link.name, link.utilisation, QString::number(100 * link.utilisation, 'f', 1) + " %"});
  int y = 50;
  const int first = chart_height(std::max(steps.size(), overlap.size()));
  barChart(p, QRect(10, y, half, first), QStringLiteral("Step time per iteration"), steps,
           categoryColor(Category::compute));
  barChart(p, QRect(20 + half, y, half, first), QStringLiteral("Compute/communication overlap per rank"), overlap,
           categoryColor(Category::all_gather));
  y += first + 10;
  const int second = chart_height(std::max(exposed.size(), links.size()));
  barChart(p, QRect(10, y, half, second), QStringLiteral("Exposed communication per rank"), exposed,
           categoryColor(Category::all_reduce));
  barChart(
      p, QRect(20 + half, y, half, second),
      links.empty() ? QStringLiteral("Busiest links (none recorded)") : QStringLiteral("Busiest links (utilisation)"),
      links, categoryColor(Category::reduce_scatter));
  y += second + 10;
  // The collectives, one row per collective op (its first group instance).
  QFont bold = p.font();
  bold.setBold(true);
  p.save();
  p.setFont(bold);
  p.drawText(10, y + 14,
             QStringLiteral("Collectives (%1 ops; first instance of each)").arg(summary_.collectives.size()));
  p.restore();
  const int columns[] = {10, 330, 450, 560, 650, 760, 870};
  const char* headers[] = {"collective", "kind", "algorithm", "ranks", "bytes", "duration", "busbw"};
  y += 22;
  p.setPen(QColor(0x50, 0x50, 0x50));
  for (int c = 0; c < 7; ++c) p.drawText(columns[c], y + 12, QString::fromLatin1(headers[c]));
  p.setPen(Qt::black);
  const int rows = std::max(0, (size.height() - y - 24) / 16);
  for (int i = 0; i < rows && i < static_cast<int>(summary_.collectives.size()); ++i) {
    const auto& c = summary_.collectives[static_cast<std::size_t>(i)];
    const int row_y = y + 16 * (i + 1) + 12;
    p.drawText(columns[0], row_y, p.fontMetrics().elidedText(c.name, Qt::ElideRight, columns[1] - columns[0] - 8));
    p.drawText(columns[1], row_y, c.kind);
    p.drawText(columns[2], row_y, c.algorithm);
    p.drawText(columns[3], row_y, QString::number(c.group_size));
    p.drawText(columns[4], row_y, formatBytes(c.bytes));
    p.drawText(columns[5], row_y, formatTime(c.duration));
    p.drawText(columns[6], row_y, QString::number(c.busbw / 1e9, 'f', 1) + " GB/s");
  }
  if (rows < static_cast<int>(summary_.collectives.size()))
    p.drawText(columns[0], y + 16 * (rows + 1) + 12,
               QStringLiteral("... %1 more").arg(summary_.collectives.size() - rows));
}

}  // namespace stratsim::gui
