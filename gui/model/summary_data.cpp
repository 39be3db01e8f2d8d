#include "model/summary_data.hpp"

#include <set>

#include <nlohmann/json.hpp>

namespace stratsim::gui {
namespace {

QString text(const std::string& value) { return QString::fromStdString(value); }

QString title(const std::string& source, const std::string& mode, int world_size) {
  return QStringLiteral("%1, %2, world size %3").arg(text(source), text(mode)).arg(world_size);
}

}  // namespace

SummaryData summaryOf(const core::Program& program, const core::RunResult& result, const core::Analysis& analysis) {
  (void)program;
  SummaryData data;
  data.title = title(result.source, result.mode, result.world_size);
  data.platform = text(result.platform);
  data.makespan = analysis.makespan;
  for (const core::IterationStats& it : analysis.iterations)
    data.iterations.push_back({it.iteration, it.step_time, it.samples_per_second, it.tokens_per_second});
  for (std::size_t s = 0; s < analysis.ranks.size(); ++s) {
    const core::RankStats& r = analysis.ranks[s];
    data.ranks.push_back({QString::fromStdString(core::describe_ranks(r.ranks, 2)), r.overlap, r.exposed_communication,
                          r.communication, r.compute});
  }
  std::set<int> seen;
  for (const core::CollectiveStats& c : analysis.collectives)
    if (seen.insert(c.op).second)
      data.collectives.push_back({text(c.name), text(std::string(core::collective_kind_name(c.kind))),
                                  text(c.algorithm), c.bytes, c.duration, c.busbw, c.group_size});
  for (const core::LinkLoad& link : analysis.busiest_links)
    data.links.push_back({text(link.name), link.utilisation, link.bytes});
  return data;
}

SummaryData summaryOf(const core::RunReport& report) {
  const nlohmann::json& doc = report.document;
  SummaryData data;
  data.title = title(doc.value("source", std::string("simulation")), doc.value("mode", std::string()),
                     doc.at("world_size").get<int>());
  data.platform = text(doc.value("platform", std::string()));
  data.makespan = doc.value("makespan_s", 0.0);
  for (const nlohmann::json& it : doc.at("iterations"))
    data.iterations.push_back({it.value("iteration", 0), it.at("step_time_s").get<double>(),
                               it.value("samples_per_s", 0.0), it.value("tokens_per_s", 0.0)});
  for (const nlohmann::json& r : doc.at("ranks")) {
    std::vector<int> ranks;
    if (r.contains("ranks"))
      for (const nlohmann::json& rank : r.at("ranks")) ranks.push_back(rank.get<int>());
    data.ranks.push_back({QString::fromStdString(core::describe_ranks(ranks, 2)), r.value("overlap", 0.0),
                          r.value("exposed_communication_s", 0.0), r.value("communication_s", 0.0),
                          r.value("compute_s", 0.0)});
  }
  std::set<int> seen;
  for (const nlohmann::json& c : doc.at("collectives"))
    if (seen.insert(c.at("op").get<int>()).second)
      data.collectives.push_back({text(c.value("name", std::string())), text(c.value("kind", std::string())),
                                  text(c.value("algorithm", std::string())), c.at("bytes").get<double>(),
                                  c.at("duration_s").get<double>(), c.value("busbw_GBps", 0.0) * 1e9,
                                  static_cast<int>(c.at("group_size").get<double>())});
  if (doc.contains("links"))
    for (const nlohmann::json& link : doc.at("links"))
      data.links.push_back(
          {text(link.value("name", std::string())), link.value("utilisation", 0.0), link.value("bytes", 0.0)});
  return data;
}

}  // namespace stratsim::gui
