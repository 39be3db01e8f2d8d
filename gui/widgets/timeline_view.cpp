#include "widgets/timeline_view.hpp"

#include <QHelpEvent>
#include <QKeyEvent>
#include <QPainter>
#include <QPainterPath>
#include <QScrollBar>
#include <QToolTip>

#include <algorithm>
#include <cmath>

#include "model/level_of_detail.hpp"
#include "model/program_layout.hpp"
#include "model/table_models.hpp"

namespace stratsim::gui {
namespace {

constexpr double kWheelZoomPerNotch = 1.25;  // one 120-unit wheel notch
constexpr double kKeyZoom = 1.5;
constexpr double kKeyPanFraction = 0.2;
constexpr int kClickSlop = 3;  // pixels a press may move and still be a click

const QColor kBackground(0xff, 0xff, 0xff);
const QColor kLaneShade(0xf4, 0xf5, 0xf7);
const QColor kHeaderShade(0xe3, 0xe6, 0xeb);
const QColor kGrid(0xd0, 0xd4, 0xda);
const QColor kText(0x20, 0x24, 0x2a);

QColor blend(const QColor& from, const QColor& to, double amount) {
  return QColor::fromRgbF(from.redF() + (to.redF() - from.redF()) * amount,
                          from.greenF() + (to.greenF() - from.greenF()) * amount,
                          from.blueF() + (to.blueF() - from.blueF()) * amount);
}

}  // namespace

QColor categoryColor(Category category) {
  switch (category) {
    case Category::compute:
      return QColor(0x00, 0x72, 0xb2);  // blue
    case Category::all_reduce:
      return QColor(0xd5, 0x5e, 0x00);  // vermillion
    case Category::all_gather:
      return QColor(0x00, 0x9e, 0x73);  // bluish green
    case Category::reduce_scatter:
      return QColor(0xe6, 0x9f, 0x00);  // orange
    case Category::broadcast:
      return QColor(0xcc, 0x79, 0xa7);  // reddish purple
    case Category::all_to_all:
      return QColor(0x56, 0xb4, 0xe9);  // sky blue
    case Category::scatter:
      return QColor(0xf0, 0xe4, 0x42);  // yellow
  }
  return Qt::gray;
}

TimelineView::TimelineView(QWidget* parent) : QWidget(parent) {
  setFocusPolicy(Qt::StrongFocus);
  setMouseTracking(true);
  setMinimumSize(400, 160);
  scroll_ = new QScrollBar(Qt::Vertical, this);
  connect(scroll_, &QScrollBar::valueChanged, this, [this](int value) {
    scroll_y_ = value;
    update();
  });
  scroll_->hide();
}

void TimelineView::setStore(std::shared_ptr<const TimelineStore> store) {
  store_ = std::move(store);
  selected_ = {};
  highlighted_.clear();
  range_.reset();
  scroll_y_ = 0;
  layout_.reset(store_ ? store_->recordedRanks() : 0, store_ ? store_->streams() : 0);
  fitLaneHeight();
  relayout();
  fitAll();
}

// A run with few lanes gets taller ones (up to kTallestLane), so its names are readable and the
// view is not mostly empty; many lanes keep the default and scroll.
void TimelineView::fitLaneHeight() {
  if (!store_) return;
  constexpr int kTallestLane = 36;
  const int ranks = store_->recordedRanks(), lanes = ranks * store_->streams();
  if (lanes == 0) return;
  const int room = lanesHeight(height()) - ranks * LaneLayout::kHeaderHeight;
  layout_.setLaneHeight(std::clamp(room / lanes, int(LaneLayout::kDefaultLaneHeight), kTallestLane));
}

void TimelineView::relayout() {
  updateScrollBar();
  update();
}

int TimelineView::timeAreaWidth() const {
  return std::max(1, width() - kLabelWidth - (scroll_->isVisible() ? scroll_->width() : 0));
}

void TimelineView::updateScrollBar() {
  const int visible = lanesHeight(height());
  const int overflow = layout_.totalHeight() - visible;
  scroll_->setVisible(overflow > 0);
  scroll_->setRange(0, std::max(0, overflow));
  scroll_->setPageStep(std::max(1, visible));
  scroll_->setSingleStep(LaneLayout::kDefaultLaneHeight);
  scroll_->setGeometry(width() - scroll_->sizeHint().width(), lanesTop(), scroll_->sizeHint().width(),
                       std::max(0, visible));
  scroll_y_ = std::clamp(scroll_y_, 0, std::max(0, overflow));
  viewport_.setWidth(timeAreaWidth());
}

void TimelineView::setVisibleRange(double start, double end) {
  viewport_.setRange(start, end);
  viewportChanged();
}

void TimelineView::fitAll() {
  const double makespan = store_ ? std::max(store_->makespan(), Viewport::kMinimumDuration) : 1.0;
  viewport_.setWidth(timeAreaWidth());
  viewport_.setRange(-0.01 * makespan, 1.01 * makespan);
  viewportChanged();
}

void TimelineView::setTimeExtent(std::optional<std::pair<double, double>> extent) {
  extent_ = extent;
  viewportChanged();
}

void TimelineView::viewportChanged() {
  if (extent_) viewport_.clampTo(extent_->first, extent_->second);
  else if (store_) viewport_.clampTo(store_->makespan());
  emit visibleRangeChanged(viewport_.start(), viewport_.end());
  update();
}

void TimelineView::selectOp(OpRef op) {
  if (!store_ || (op.valid() && (op.recorded >= store_->recordedRanks() ||
                                 static_cast<std::size_t>(op.op) >= store_->program().ops.size())))
    return;
  selected_ = op;
  if (op.valid()) {
    if (layout_.collapsed(op.recorded)) {
      layout_.setCollapsed(op.recorded, false);
      updateScrollBar();
    }
    const core::OpTiming& t = store_->timing(op);
    // Into view: zoom out so the op fits in the middle half, or pan so it sits in the middle.
    if (t.end - t.start > 0.5 * viewport_.duration()) {
      const double duration = 2.0 * (t.end - t.start) + Viewport::kMinimumDuration;
      viewport_.setRange(0.5 * (t.start + t.end) - 0.5 * duration, 0.5 * (t.start + t.end) + 0.5 * duration);
    } else if (t.start < viewport_.start() || t.end > viewport_.end()) {
      const double half = 0.5 * viewport_.duration();
      viewport_.setRange(0.5 * (t.start + t.end) - half, 0.5 * (t.start + t.end) + half);
    }
    if (const LaneRow* row = layout_.laneRow(op.recorded, store_->op(op).stream)) {
      const int visible = lanesHeight(height());
      if (row->y < scroll_y_ || row->y + row->height > scroll_y_ + visible)
        scroll_->setValue(std::max(0, row->y - visible / 2));
    }
    viewportChanged();
  }
  update();
  emit opSelected(op);
}

void TimelineView::setHighlightedOps(std::vector<OpRef> ops) {
  highlighted_ = std::move(ops);
  update();
}

void TimelineView::setSelectedRange(double start, double end) {
  if (end < start) std::swap(start, end);
  range_ = std::make_pair(start, end);
  update();
  emit rangeSelected(start, end);
}

void TimelineView::clearSelectedRange() {
  if (!range_) return;
  range_.reset();
  update();
  emit rangeCleared();
}

// ---- painting ----

void TimelineView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  render(p, size());
}

void TimelineView::resizeEvent(QResizeEvent*) {
  fitLaneHeight();
  updateScrollBar();
  viewport_.setWidth(timeAreaWidth());
}

void TimelineView::render(QPainter& p, QSize size) const {
  p.fillRect(QRect(QPoint(0, 0), size), kBackground);
  if (!store_) {
    p.setPen(kText);
    p.drawText(QRect(QPoint(0, 0), size), Qt::AlignCenter,
               QStringLiteral("No timeline open (File > Open, or drop a file)"));
    return;
  }
  Viewport viewport = viewport_;
  const int scrollbar = size == this->size() && scroll_->isVisible() ? scroll_->width() : 0;
  viewport.setWidth(std::max(1, size.width() - kLabelWidth - scrollbar));
  drawLanes(p, viewport, size);
  drawGhost(p, viewport, size);
  drawOverlays(p, viewport, size);
  drawAxis(p, viewport, size.width());
  drawLegend(p, size);
}

void TimelineView::drawAxis(QPainter& p, const Viewport& viewport, int width) const {
  p.fillRect(QRect(0, 0, width, kAxisHeight), kHeaderShade);
  p.setPen(kText);
  const QString label =
      store_->result().mode == "unscheduled" ? QStringLiteral("program (slots, not times)") : QStringLiteral("time");
  p.drawText(QRect(6, 0, kLabelWidth - 6, kAxisHeight), Qt::AlignVCenter | Qt::AlignLeft, label);
  const bool in_slots = store_->result().mode == "unscheduled";
  for (const Tick& tick : ticks(viewport)) {
    const int x = kLabelWidth + static_cast<int>(std::lround(viewport.xOf(tick.time)));
    p.setPen(kText);
    p.drawLine(x, kAxisHeight - 6, x, kAxisHeight);
    p.drawText(x + 3, kAxisHeight - 8,
               in_slots ? QStringLiteral("slot %1").arg(tick.time / kSlotSeconds, 0, 'g', 6) : tick.label);
  }
}

// The lanes are drawn in two passes: every lane's per-pixel columns written straight into one
// image (a million ops at whole-run zoom are ~2,000 distinct columns per lane: one fillRect each
// would dominate the frame), then, with QPainter, the outlines and names of ops wide enough to
// show them, and the label column.
void TimelineView::drawLanes(QPainter& p, const Viewport& viewport, QSize size) const {
  const int top = lanesTop(), bottom = size.height() - kLegendHeight;
  const int height = std::max(1, bottom - top);
  QImage lanes(viewport.width(), height, QImage::Format_RGB32);
  lanes.fill(kBackground);
  const auto fill = [&](int y0, int y1, int x0, int x1, QRgb colour) {
    y0 = std::max(0, y0);
    y1 = std::min(height, y1);
    x0 = std::max(0, x0);
    x1 = std::min(lanes.width(), x1);
    for (int y = y0; y < y1; ++y) {
      QRgb* line = reinterpret_cast<QRgb*>(lanes.scanLine(y));
      std::fill(line + x0, line + x1, colour);
    }
  };
  const std::vector<Tick> grid = ticks(viewport);
  std::vector<std::pair<QRect, LaneRow>> labelled;  // visible rows, for the label pass
  std::vector<std::pair<QRect, ColumnRun>> boxes;   // single-op runs, for the outline pass
  for (const LaneRow& row : layout_.rows()) {
    const int y = row.y - scroll_y_;
    if (y + row.height < 0 || y > height) continue;
    labelled.emplace_back(QRect(0, top + y, kLabelWidth, row.height), row);
    if (row.header) fill(y, y + row.height, 0, lanes.width(), kHeaderShade.rgb());
    else if (row.stream % 2 == 1) fill(y, y + row.height, 0, lanes.width(), kLaneShade.rgb());
    if (!row.header)
      for (const Tick& tick : grid) {
        const int x = static_cast<int>(std::lround(viewport.xOf(tick.time)));
        fill(y, y + row.height, x, x + 1, kGrid.rgb());
      }
    const bool collapsed_header = row.header && layout_.collapsed(row.recorded);
    if (row.header && !collapsed_header) continue;
    // A collapsed rank shows its compute stream in its header.
    const int stream = collapsed_header ? 0 : row.stream;
    const int inset = collapsed_header ? 3 : (row.height >= 8 ? 2 : 0);
    const int y0 = y + inset, y1 = y + row.height - inset;
    for (const ColumnRun& run : columnRuns(laneColumns(*store_, row.recorded, stream, viewport))) {
      const QColor colour = categoryColor(run.column.dominant);
      const QColor shown = run.column.op >= 0 ? colour : blend(kBackground, colour, 0.35 + 0.65 * run.column.busy);
      fill(y0, y1, run.first, run.last + 1, shown.rgb());
      if (run.column.op >= 0 && run.last - run.first >= 3)
        boxes.emplace_back(QRect(kLabelWidth + run.first, top + y0, run.last - run.first + 1, y1 - y0), run);
    }
  }
  p.drawImage(kLabelWidth, top, lanes);
  p.save();
  p.setClipRect(QRect(0, top, size.width(), height));
  for (const auto& [box, run] : boxes) {
    p.setPen(categoryColor(run.column.dominant).darker(140));
    p.drawRect(box.adjusted(0, 0, -1, -1));
    if (box.width() > 36 && box.height() >= 12) {
      p.setPen(Qt::white);
      const QRect text_box = box.adjusted(3, 0, -2, 0);
      p.drawText(text_box, Qt::AlignVCenter | Qt::AlignLeft,
                 p.fontMetrics().elidedText(boxLabel(run.column.op), Qt::ElideRight, text_box.width()));
    }
  }
  for (const auto& [label, row] : labelled) {
    if (row.header) {
      p.fillRect(label, kHeaderShade);
      p.setPen(kText);
      const QString arrow = layout_.collapsed(row.recorded) ? QStringLiteral("▸ ") : QStringLiteral("▾ ");
      p.drawText(label.adjusted(4, 0, 0, 0), Qt::AlignVCenter | Qt::AlignLeft, arrow + store_->rankLabel(row.recorded));
    } else {
      p.fillRect(label, row.stream % 2 == 1 ? kLaneShade : kBackground);
      if (row.height >= 10) {
        p.setPen(kText);
        p.drawText(label.adjusted(18, 0, -4, 0), Qt::AlignVCenter | Qt::AlignLeft,
                   QString::fromStdString(store_->program().streams[row.stream]));
      }
    }
  }
  // Iteration boundaries: where each iteration's last op ended on any rank.
  p.setPen(QPen(QColor(0x40, 0x40, 0x40), 1, Qt::DashLine));
  for (double end : store_->result().iteration_end) {
    const double x = kLabelWidth + viewport.xOf(end);
    if (x >= kLabelWidth && x <= kLabelWidth + viewport.width()) p.drawLine(QPointF(x, top), QPointF(x, bottom));
  }
  p.restore();
}

void TimelineView::setGhost(std::shared_ptr<const TimelineStore> other, double offset) {
  ghost_ = std::move(other);
  ghost_offset_ = offset;
  update();
}

// The other run's ops as outlines in their category's colour, on the lanes that have a
// counterpart there; ops under two pixels wide are left out (the lane's own colour shows them).
void TimelineView::drawGhost(QPainter& p, const Viewport& viewport, QSize size) const {
  ghost_drawn_ = 0;
  if (!ghost_) return;
  constexpr int kMaxOutlinesPerLane = 4000;
  const int top = lanesTop(), bottom = size.height() - kLegendHeight;
  p.save();
  p.setClipRect(QRect(kLabelWidth, top, viewport.width(), bottom - top));
  const auto& names = ghost_->program().streams;
  for (const LaneRow& row : layout_.rows()) {
    if (row.header || row.recorded >= ghost_->recordedRanks()) continue;
    const int y = top + row.y - scroll_y_;
    if (y + row.height < top || y > bottom) continue;
    const auto name = std::find(names.begin(), names.end(), store_->program().streams[row.stream]);
    if (name == names.end()) continue;
    const Lane& lane = ghost_->lane(row.recorded, static_cast<int>(name - names.begin()));
    const double t0 = viewport.start() + ghost_offset_, t1 = viewport.end() + ghost_offset_;
    // Ops of a lane run one after another: the first that ends inside the window is found by search.
    const auto first = std::partition_point(lane.ops->begin(), lane.ops->end(), [&](std::int32_t op) {
      return ghost_->timing({row.recorded, op}).end < t0;
    });
    int drawn = 0;
    for (auto it = first; it != lane.ops->end() && drawn < kMaxOutlinesPerLane; ++it) {
      const core::OpTiming& t = ghost_->timing({row.recorded, *it});
      if (t.start > t1) break;
      const double x0 = kLabelWidth + viewport.xOf(t.start - ghost_offset_);
      const double x1 = kLabelWidth + viewport.xOf(t.end - ghost_offset_);
      if (x1 - x0 < 2) continue;
      p.setPen(QPen(categoryColor(ghost_->category(*it)).darker(150), 1.5, Qt::DashLine));
      p.setBrush(Qt::NoBrush);
      p.drawRect(QRectF(QPointF(x0, y + 1.5), QPointF(x1, y + row.height - 1.5)));
      ++drawn;
    }
    ghost_drawn_ += drawn;
  }
  p.restore();
}

QRectF TimelineView::opRect(const Viewport& viewport, OpRef op) const {
  if (!store_ || !op.valid()) return {};
  const LaneRow* row = layout_.laneRow(op.recorded, store_->op(op).stream);
  if (!row) return {};
  const core::OpTiming& t = store_->timing(op);
  const double x0 = kLabelWidth + viewport.xOf(t.start), x1 = kLabelWidth + viewport.xOf(t.end);
  const double y = lanesTop() + row->y - scroll_y_;
  return QRectF(QPointF(x0, y + 1), QPointF(std::max(x1, x0 + 1.0), y + row->height - 1));
}

void TimelineView::drawOverlays(QPainter& p, const Viewport& viewport, QSize size) const {
  const int top = lanesTop(), bottom = size.height() - kLegendHeight;
  p.save();
  p.setClipRect(QRect(kLabelWidth, top, viewport.width(), bottom - top));
  p.setRenderHint(QPainter::Antialiasing, true);
  if (range_) {
    const double x0 = kLabelWidth + viewport.xOf(range_->first), x1 = kLabelWidth + viewport.xOf(range_->second);
    p.fillRect(QRectF(QPointF(x0, top), QPointF(x1, bottom)), QColor(0x33, 0x66, 0xcc, 48));
    p.setPen(QPen(QColor(0x33, 0x66, 0xcc), 1));
    p.drawLine(QPointF(x0, top), QPointF(x0, bottom));
    p.drawLine(QPointF(x1, top), QPointF(x1, bottom));
  }
  // Highlights: visible ones only (a search may match thousands).
  p.setPen(QPen(QColor(0xff, 0xd7, 0x00), 2));
  for (OpRef op : highlighted_) {
    const QRectF box = opRect(viewport, op);
    if (box.isEmpty() || box.right() < kLabelWidth || box.left() > kLabelWidth + viewport.width() ||
        box.bottom() < top || box.top() > bottom)
      continue;
    p.drawRect(box.adjusted(-1, -1, 1, 1));
  }
  if (store_->result().mode == "unscheduled") drawProgramArrows(p, viewport, top, bottom);
  if (selected_.valid()) {
    const QRectF box = opRect(viewport, selected_);
    // The collective's instances on the other ranks, linked by flow lines from start to start: the
    // slope shows arrival skew.
    p.setPen(QPen(QColor(0x20, 0x20, 0x20), 1.2, Qt::DashLine));
    for (OpRef other : store_->instancesOf(selected_)) {
      if (other == selected_) continue;
      const QRectF target = opRect(viewport, other);
      if (target.isEmpty() || box.isEmpty()) continue;
      p.drawLine(QPointF(box.left(), box.center().y()), QPointF(target.left(), target.center().y()));
      p.drawRect(target);
    }
    // Dependencies: arrows from each dependency's end to the op's start.
    p.setPen(QPen(QColor(0x80, 0x20, 0x80), 1.4));
    for (int dep : store_->op(selected_).deps) drawArrow(p, opRect(viewport, {selected_.recorded, dep}), box);
    if (!box.isEmpty()) {
      p.setPen(QPen(Qt::black, 2));
      p.setBrush(Qt::NoBrush);
      p.drawRect(box.adjusted(-1, -1, 1, 1));
    }
  }
  p.restore();
}

// An op's name in its box, less a leading collective kind the colour already says
// ("all_gather fsdp unit fc1 (pre-forward)" -> "fsdp unit fc1 (pre-forward)").
QString TimelineView::boxLabel(int op) const {
  const QString name = QString::fromStdString(store_->program().ops[op].name);
  const Category category = store_->category(op);
  const QString kind = category_name(category) + ' ';
  return category != Category::compute && name.startsWith(kind) ? name.mid(kind.size()) : name;
}

void TimelineView::drawArrow(QPainter& p, QRectF from, QRectF to) {
  if (from.isEmpty() || to.isEmpty()) return;
  const QPointF a(from.right(), from.center().y()), b(to.left(), to.center().y());
  p.drawLine(a, b);
  const double angle = std::atan2(b.y() - a.y(), b.x() - a.x());
  for (double side : {-0.45, 0.45}) p.drawLine(b, b - QPointF(7 * std::cos(angle + side), 7 * std::sin(angle + side)));
}

// A program has no times: its ops sit in slots (program_layout.hpp), and what it says is the DAG,
// so every dependency between ops in view is drawn. Bounded by the ops in view, which at a
// readable zoom are few.
void TimelineView::drawProgramArrows(QPainter& p, const Viewport& viewport, int top, int bottom) const {
  constexpr int kMostArrows = 4000;
  p.setPen(QPen(QColor(0x60, 0x60, 0x60, 160), 1));
  int drawn = 0;
  for (const core::ProgramOp& op : store_->program().ops) {
    const core::OpTiming& t = store_->timing({0, op.id});
    if (t.end < viewport.start() || t.start > viewport.end()) continue;
    const QRectF to = opRect(viewport, {0, op.id});
    if (to.isEmpty() || to.bottom() < top || to.top() > bottom) continue;
    for (int dep : op.deps) {
      drawArrow(p, opRect(viewport, {0, dep}), to);
      if (++drawn >= kMostArrows) return;
    }
  }
}

void TimelineView::drawLegend(QPainter& p, QSize size) const {
  const int y = size.height() - kLegendHeight;
  p.fillRect(QRect(0, y, size.width(), kLegendHeight), kHeaderShade);
  int x = 6;
  p.setPen(kText);
  for (int c = 0; c < kCategoryCount; ++c) {
    const Category category = static_cast<Category>(c);
    p.fillRect(QRect(x, y + 6, 12, 10), categoryColor(category));
    const QString name = category_name(category);
    p.drawText(x + 16, y + 16, name);
    x += 24 + p.fontMetrics().horizontalAdvance(name);
  }
  p.drawText(QRect(x, y, size.width() - x - 6, kLegendHeight), Qt::AlignVCenter | Qt::AlignRight,
             QStringLiteral("- - iteration end     paler: several ops in a pixel"));
}

// ---- interaction ----

QPoint TimelineView::pointOf(OpRef op) const {
  const QRectF box = opRect(viewport_, op);
  if (box.isEmpty()) return {-1, -1};
  const double left = std::max(box.left(), double(kLabelWidth)),
               right = std::min(box.right(), double(kLabelWidth + viewport_.width() - 1));
  return QPoint(static_cast<int>(0.5 * (left + right)), static_cast<int>(box.center().y()));
}

OpRef TimelineView::opAtPoint(QPoint point) const {
  if (!store_ || point.x() < kLabelWidth || point.y() < lanesTop()) return {};
  const LaneRow* row = layout_.rowAt(point.y() - lanesTop() + scroll_y_);
  if (!row) return {};
  const int stream = row->header ? (layout_.collapsed(row->recorded) ? 0 : -1) : row->stream;
  if (stream < 0) return {};
  return store_->opAt(row->recorded, stream, viewport_.timeOf(point.x() - kLabelWidth),
                      2.0 * viewport_.secondsPerPixel());
}

void TimelineView::wheelEvent(QWheelEvent* event) {
  const QPoint angle = event->angleDelta();
  if (event->modifiers() & Qt::AltModifier) {  // Alt swaps the wheel's axis on some platforms
    const int delta = angle.y() != 0 ? angle.y() : angle.x();
    scroll_->setValue(scroll_->value() - delta / 120 * 3 * LaneLayout::kDefaultLaneHeight);
  } else if (angle.y() != 0) {
    const double x = event->position().x() - kLabelWidth;
    viewport_.zoom(std::pow(kWheelZoomPerNotch, angle.y() / 120.0), std::clamp(x, 0.0, double(viewport_.width())));
    viewportChanged();
  } else if (angle.x() != 0) {
    viewport_.pan(-angle.x() / 120.0 * 0.1 * viewport_.width());
    viewportChanged();
  }
  event->accept();
}

void TimelineView::mousePressEvent(QMouseEvent* event) {
  setFocus(Qt::MouseFocusReason);
  if (event->button() != Qt::LeftButton) return;
  press_point_ = event->position().toPoint();
  moved_ = false;
  press_time_ = viewport_.timeOf(press_point_.x() - kLabelWidth);
  const bool on_axis = press_point_.y() < kAxisHeight && press_point_.x() >= kLabelWidth;
  const bool range_drag = on_axis || (event->modifiers() & Qt::ControlModifier);
  drag_ = range_drag ? Drag::range : Drag::pan;
}

void TimelineView::mouseMoveEvent(QMouseEvent* event) {
  const QPoint point = event->position().toPoint();
  if (drag_ == Drag::none) return;
  if ((point - press_point_).manhattanLength() > kClickSlop) moved_ = true;
  if (!moved_) return;
  if (drag_ == Drag::pan) {
    viewport_.pan(press_point_.x() - point.x());
    scroll_->setValue(scroll_->value() + press_point_.y() - point.y());
    press_point_ = point;
    viewportChanged();
  } else {
    const double now = viewport_.timeOf(point.x() - kLabelWidth);
    range_ = std::make_pair(std::min(press_time_, now), std::max(press_time_, now));
    update();
  }
}

void TimelineView::mouseReleaseEvent(QMouseEvent* event) {
  if (event->button() != Qt::LeftButton || drag_ == Drag::none) return;
  const Drag drag = std::exchange(drag_, Drag::none);
  if (moved_) {
    if (drag == Drag::range && range_) setSelectedRange(range_->first, range_->second);
    return;
  }
  const QPoint point = event->position().toPoint();
  if (point.x() < kLabelWidth && point.y() >= lanesTop()) {  // a click on a rank's header toggles it
    if (const LaneRow* row = layout_.rowAt(point.y() - lanesTop() + scroll_y_); row && row->header) {
      layout_.toggle(row->recorded);
      relayout();
    }
    return;
  }
  selectOp(opAtPoint(point));
}

void TimelineView::keyPressEvent(QKeyEvent* event) {
  const double middle = 0.5 * viewport_.width();
  switch (event->key()) {
    case Qt::Key_W:
      viewport_.zoom(kKeyZoom, middle);
      break;
    case Qt::Key_S:
      viewport_.zoom(1 / kKeyZoom, middle);
      break;
    case Qt::Key_A:
      viewport_.pan(-kKeyPanFraction * viewport_.width());
      break;
    case Qt::Key_D:
      viewport_.pan(kKeyPanFraction * viewport_.width());
      break;
    case Qt::Key_F:
      if (event->modifiers() & Qt::ControlModifier) {
        emit findRequested();
        return;
      }
      fitAll();
      return;
    case Qt::Key_Z:
      zoomToSelection();
      return;
    case Qt::Key_Period:
      step(true);
      return;
    case Qt::Key_Comma:
      step(false);
      return;
    case Qt::Key_Home:
      viewport_.setRange(0, viewport_.duration());
      break;
    case Qt::Key_End:
      if (store_) viewport_.setRange(store_->makespan() - viewport_.duration(), store_->makespan());
      break;
    case Qt::Key_Escape:
      if (range_) clearSelectedRange();
      else if (selected_.valid()) selectOp({});
      return;
    default:
      QWidget::keyPressEvent(event);
      return;
  }
  viewportChanged();
}

void TimelineView::zoomToSelection() {
  if (range_) {
    setVisibleRange(range_->first, range_->second);
  } else if (selected_.valid() && store_) {
    const core::OpTiming& t = store_->timing(selected_);
    const double margin = 0.1 * std::max(t.end - t.start, Viewport::kMinimumDuration);
    setVisibleRange(t.start - margin, t.end + margin);
  }
}

void TimelineView::step(bool forward) {
  if (!store_ || !selected_.valid()) return;
  const OpRef next = forward ? store_->nextOnLane(selected_) : store_->previousOnLane(selected_);
  if (next.valid()) selectOp(next);
}

bool TimelineView::event(QEvent* event) {
  if (event->type() == QEvent::ToolTip && store_) {
    auto* help = static_cast<QHelpEvent*>(event);
    const OpRef op = opAtPoint(help->pos());
    if (!op.valid()) {
      QToolTip::hideText();
      event->ignore();
      return true;
    }
    const core::ProgramOp& program_op = store_->op(op);
    const core::OpTiming& t = store_->timing(op);
    QString tip =
        QStringLiteral("<b>%1</b><br>%2 on %3, %4<br>duration %5")
            .arg(QString::fromStdString(program_op.name).toHtmlEscaped(), category_name(store_->category(op.op)),
                 QString::fromStdString(store_->program().streams[program_op.stream]), store_->rankLabel(op.recorded),
                 formatTime(t.end - t.start));
    if (program_op.type == core::OpType::collective)
      tip += QStringLiteral("<br>%1, waited %2")
                 .arg(formatBytes(static_cast<double>(program_op.bytes)), formatTime(t.start - t.issue));
    QToolTip::showText(help->globalPos(), tip, this);
    return true;
  }
  return QWidget::event(event);
}

}  // namespace stratsim::gui
