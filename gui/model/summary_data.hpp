// What the Summary view draws, from either a timeline's analysis or a `--json` run report (which
// carries the same figures), so one view serves both documents.
#pragma once

#include <QString>

#include <vector>

#include "stratsim/core/comparison.hpp"
#include "stratsim/core/run_analysis.hpp"

namespace stratsim::gui {

struct SummaryData {
  QString title;  // "simulation, representative, world size 16384"
  QString platform;
  double makespan = 0;
  struct Iteration {
    int index = 1;
    double step_time = 0, samples_per_second = 0, tokens_per_second = 0;
  };
  struct Rank {
    QString label;
    double overlap = 0, exposed = 0, communication = 0, compute = 0;
  };
  struct Collective {
    QString name, kind, algorithm;
    double bytes = 0, duration = 0, busbw = 0;
    int group_size = 1;
  };
  struct Link {
    QString name;
    double utilisation = 0, bytes = 0;
  };
  std::vector<Iteration> iterations;
  std::vector<Rank> ranks;
  std::vector<Collective> collectives;  // one per collective op (first instance), in op order
  std::vector<Link> links;              // busiest first
};

SummaryData summaryOf(const core::Program& program, const core::RunResult& result, const core::Analysis& analysis);
// From a report core has validated (core::run_report_from_json checks every field read here).
SummaryData summaryOf(const core::RunReport& report);

}  // namespace stratsim::gui
