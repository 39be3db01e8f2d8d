#include "model/viewport.hpp"

#include <algorithm>
#include <cmath>

namespace stratsim::gui {

void Viewport::normalise() {
  width_ = std::max(1, width_);
  if (!(end_ - start_ >= kMinimumDuration)) {
    const double middle = 0.5 * (start_ + end_);
    start_ = middle - 0.5 * kMinimumDuration;
    end_ = middle + 0.5 * kMinimumDuration;
  }
}

void Viewport::setWidth(int width) {
  width_ = width;
  normalise();
}

void Viewport::setRange(double start, double end) {
  start_ = start;
  end_ = end;
  normalise();
}

void Viewport::zoom(double factor, double anchor_x) {
  if (!(factor > 0)) return;
  const double anchor = timeOf(anchor_x);
  const double duration = std::max(kMinimumDuration, (end_ - start_) / factor);
  start_ = anchor - anchor_x / width_ * duration;
  end_ = start_ + duration;
  normalise();
}

void Viewport::pan(double pixels) {
  const double shift = pixels * secondsPerPixel();
  start_ += shift;
  end_ += shift;
}

void Viewport::clampTo(double limit) { clampTo(0, limit); }

void Viewport::clampTo(double begin, double end) {
  const double limit = std::max(end - begin, kMinimumDuration);
  const double duration = std::min(end_ - start_, limit * 1.05);
  // Allow a 5% margin either side so the first and last ops are not glued to the edges.
  const double low = begin - 0.025 * limit, high = begin + limit * 1.025;
  start_ = std::clamp(start_, low, std::max(low, high - duration));
  end_ = start_ + duration;
  normalise();
}

namespace {

struct Unit {
  double scale;
  const char* name;
};

Unit unit_for(double seconds) {
  const double magnitude = std::fabs(seconds);
  if (magnitude >= 1) return {1, "s"};
  if (magnitude >= 1e-3) return {1e3, "ms"};
  if (magnitude >= 1e-6) return {1e6, "us"};
  return {1e9, "ns"};
}

}  // namespace

QString formatTime(double seconds) {
  if (seconds == 0) return QStringLiteral("0 s");
  const Unit unit = unit_for(seconds);
  return QStringLiteral("%1 %2").arg(QString::number(seconds * unit.scale, 'g', 3), unit.name);
}

std::vector<Tick> ticks(const Viewport& viewport, double spacing) {
  const double wanted = viewport.secondsPerPixel() * spacing;
  const double decade = std::pow(10.0, std::floor(std::log10(wanted)));
  double step = decade;
  for (double multiple : {1.0, 2.0, 5.0, 10.0})
    if (decade * multiple >= wanted) {
      step = decade * multiple;
      break;
    }
  // One unit for every label, the one the window's far end reads in ("1.00005 ms", not
  // "1000050 ns"), with the decimals the step needs in it.
  const Unit unit = unit_for(std::max({std::fabs(viewport.start()), std::fabs(viewport.end()), step}));
  const int decimals = std::max(0, static_cast<int>(std::ceil(-std::log10(step * unit.scale) - 1e-9)));
  std::vector<Tick> out;
  for (double t = std::ceil(viewport.start() / step) * step; t <= viewport.end(); t += step) {
    const double shown = std::fabs(t) < step * 1e-6 ? 0.0 : t;
    out.push_back({shown, QStringLiteral("%1 %2").arg(QString::number(shown * unit.scale, 'f', decimals), unit.name)});
    if (out.size() > 1000) break;  // a degenerate viewport must not loop forever
  }
  return out;
}

}  // namespace stratsim::gui
