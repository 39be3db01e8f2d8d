// The timeline: one lane per (recorded rank, stream), grouped by rank (click a rank's header to
// collapse it), a time axis whose unit follows the zoom, iteration boundaries, compute and each
// collective kind in its own colour (legend at the bottom). Drawn with QPainter from per-pixel
// aggregates (level_of_detail.hpp), never one item per op, so a million ops paint in one frame.
//
// Mouse: wheel or Ctrl+wheel zooms around the cursor, Alt+wheel (or the scroll bar) scrolls the
// lanes; drag or Shift+drag pans; Ctrl+drag in the lanes, or a drag along the time axis, selects a
// range; click selects an op; hover shows a tooltip. Keys: W/S zoom, A/D pan, F fit all, Z zoom
// to the selected range or op, . and , next/previous op on the selected op's lane, Home/End, Escape
// clears the range (then the selection), Ctrl+F asks for the find bar.
#pragma once

#include <QWidget>

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "model/lane_layout.hpp"
#include "model/timeline_store.hpp"
#include "model/viewport.hpp"

class QScrollBar;

namespace stratsim::gui {

// Colour-blind-safe (Okabe-Ito) colours per category.
QColor categoryColor(Category category);

class TimelineView : public QWidget {
  Q_OBJECT
 public:
  explicit TimelineView(QWidget* parent = nullptr);

  void setStore(std::shared_ptr<const TimelineStore> store);
  const TimelineStore* store() const { return store_.get(); }

  double visibleStart() const { return viewport_.start(); }
  double visibleEnd() const { return viewport_.end(); }
  void setVisibleRange(double start, double end);
  // How far zoom and pan may go: [0, makespan] unless set (a pane locked to a longer run's goes
  // as far as that run; nullopt restores the default).
  void setTimeExtent(std::optional<std::pair<double, double>> extent);
  void fitAll();

  OpRef selectedOp() const { return selected_; }
  void selectOp(OpRef op);  // scrolls and zooms it into view when it is not
  void setHighlightedOps(std::vector<OpRef> ops);
  const std::vector<OpRef>& highlightedOps() const { return highlighted_; }

  std::optional<std::pair<double, double>> selectedRange() const { return range_; }
  void setSelectedRange(double start, double end);
  void clearSelectedRange();

  // Ghost mode: another run's ops drawn as outlines over this view's lanes (a lane of the other
  // run counts as this one's when its recorded rank index and stream name agree), shifted so that
  // the other run's time t is drawn at t - offset. nullptr turns it off.
  void setGhost(std::shared_ptr<const TimelineStore> other, double offset);
  const TimelineStore* ghost() const { return ghost_.get(); }
  int ghostOutlinesDrawn() const { return ghost_drawn_; }  // in the last frame, for tests

  LaneLayout& layout() { return layout_; }
  void relayout();  // after changing layout() from outside

  // Geometry, public so tests can aim at known ops.
  static constexpr int kLabelWidth = 190;
  static constexpr int kAxisHeight = 24;
  static constexpr int kLegendHeight = 22;
  int timeAreaWidth() const;
  QPoint pointOf(OpRef op) const;  // the centre of the op's box in widget coordinates (clamped to the view)
  OpRef opAtPoint(QPoint point) const;

  // Draws the whole view into `painter` at `size` (what paintEvent does; --render uses it offscreen).
  void render(QPainter& painter, QSize size) const;

 signals:
  void opSelected(stratsim::gui::OpRef op);
  void rangeSelected(double start, double end);
  void rangeCleared();
  void visibleRangeChanged(double start, double end);
  void findRequested();

 protected:
  void paintEvent(QPaintEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void wheelEvent(QWheelEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mouseReleaseEvent(QMouseEvent* event) override;
  void keyPressEvent(QKeyEvent* event) override;
  bool event(QEvent* event) override;  // tooltips

 private:
  enum class Drag { none, pan, range };
  void viewportChanged();
  int lanesTop() const { return kAxisHeight; }
  int lanesHeight(int height) const { return height - kAxisHeight - kLegendHeight; }
  void updateScrollBar();
  void fitLaneHeight();
  void zoomToSelection();
  void step(bool forward);

  void drawAxis(QPainter& p, const Viewport& viewport, int width) const;
  void drawLanes(QPainter& p, const Viewport& viewport, QSize size) const;
  void drawOverlays(QPainter& p, const Viewport& viewport, QSize size) const;
  void drawLegend(QPainter& p, QSize size) const;
  void drawProgramArrows(QPainter& p, const Viewport& viewport, int top, int bottom) const;
  void drawGhost(QPainter& p, const Viewport& viewport, QSize size) const;
  static void drawArrow(QPainter& p, QRectF from, QRectF to);
  QString boxLabel(int op) const;
  QRectF opRect(const Viewport& viewport, OpRef op) const;  // in widget coordinates; empty when hidden

  std::shared_ptr<const TimelineStore> store_;
  Viewport viewport_;
  LaneLayout layout_;
  QScrollBar* scroll_ = nullptr;
  int scroll_y_ = 0;
  OpRef selected_;
  std::vector<OpRef> highlighted_;
  std::optional<std::pair<double, double>> range_;
  std::optional<std::pair<double, double>> extent_;
  std::shared_ptr<const TimelineStore> ghost_;
  double ghost_offset_ = 0;
  mutable int ghost_drawn_ = 0;

  Drag drag_ = Drag::none;
  QPoint press_point_;
  double press_time_ = 0;
  bool moved_ = false;
};

}  // namespace stratsim::gui
