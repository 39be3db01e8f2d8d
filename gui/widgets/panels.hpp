// The panels beside the timeline: the selected op's details (dependencies and dependants are
// links that select them), the find bar (Ctrl+F), and the Summary (bar charts drawn with
// QPainter: step time per iteration, overlap and exposed communication per rank, the busiest
// links; the collectives table).
#pragma once

#include <QLineEdit>
#include <QTextBrowser>
#include <QWidget>

#include <memory>
#include <vector>

#include "model/summary_data.hpp"
#include "model/timeline_store.hpp"

class QLabel;
class QTableView;

namespace stratsim::gui {

class DetailsPanel : public QTextBrowser {
  Q_OBJECT
 public:
  explicit DetailsPanel(QWidget* parent = nullptr);
  void setStore(std::shared_ptr<const TimelineStore> store);
  void showOp(OpRef op);

 signals:
  void opActivated(stratsim::gui::OpRef op);  // a dependency or dependant link was clicked

 private:
  std::shared_ptr<const TimelineStore> store_;
};

class FindBar : public QWidget {
  Q_OBJECT
 public:
  explicit FindBar(QWidget* parent = nullptr);
  void setStore(std::shared_ptr<const TimelineStore> store);
  void activate();  // shows and focuses the text field
  QLineEdit* field() const { return field_; }
  const std::vector<OpRef>& matches() const { return matches_; }
  int current() const { return current_; }

 signals:
  void matchesChanged(std::vector<stratsim::gui::OpRef> matches);
  void matchSelected(stratsim::gui::OpRef op);

 protected:
  void keyPressEvent(QKeyEvent* event) override;

 private:
  void search();
  void step(int direction);
  std::shared_ptr<const TimelineStore> store_;
  QLineEdit* field_;
  QLabel* count_;
  std::vector<OpRef> matches_;
  int current_ = -1;
};

// Bar charts of a SummaryData.
class SummaryCharts : public QWidget {
  Q_OBJECT
 public:
  explicit SummaryCharts(QWidget* parent = nullptr);
  void setSummary(SummaryData summary);
  void render(QPainter& painter, QSize size) const;
  QSize sizeHint() const override { return {900, 620}; }

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  SummaryData summary_;
};

}  // namespace stratsim::gui

Q_DECLARE_METATYPE(stratsim::gui::OpRef)
