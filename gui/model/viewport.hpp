// The visible time window and its mapping to pixels, and the time axis's ticks. Pure arithmetic:
// unit-tested without widgets (as hotspot tests its time<->x mapping).
#pragma once

#include <QString>

#include <vector>

namespace stratsim::gui {

class Viewport {
 public:
  Viewport() = default;
  Viewport(double start, double end, int width) : start_(start), end_(end), width_(width) { normalise(); }

  double start() const { return start_; }
  double end() const { return end_; }
  double duration() const { return end_ - start_; }
  int width() const { return width_; }
  double secondsPerPixel() const { return duration() / width_; }

  double xOf(double time) const { return (time - start_) / secondsPerPixel(); }
  double timeOf(double x) const { return start_ + x * secondsPerPixel(); }

  void setWidth(int width);
  void setRange(double start, double end);
  // Zoom by `factor` (> 1 zooms in) keeping the time under pixel `anchor_x` where it is.
  void zoom(double factor, double anchor_x);
  void pan(double pixels);  // positive: later times come into view
  // Keeps the window inside [0, limit] where it fits (never narrower than kMinimumDuration).
  void clampTo(double limit);              // [0, limit]
  void clampTo(double begin, double end);  // [begin, end], with the same margins

  static constexpr double kMinimumDuration = 1e-9;  // one nanosecond across the whole view

 private:
  void normalise();
  double start_ = 0, end_ = 1;
  int width_ = 1;
};

struct Tick {
  double time = 0;
  QString label;
};

// Ticks at 1, 2 or 5 x 10^k seconds, about one per `spacing` pixels, labelled in the unit that
// suits the step (s, ms, us, ns), with as many decimals as the step needs.
std::vector<Tick> ticks(const Viewport& viewport, double spacing = 100);
// "1.5 ms", "250 us": a duration or time for labels and tooltips (3 significant digits).
QString formatTime(double seconds);

}  // namespace stratsim::gui
