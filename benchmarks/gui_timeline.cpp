// The viewer's cost (Google Benchmark; needs no display: it runs on Qt's offscreen platform).
//
//   * BM_ViewerOpen/R            read_document(file) + TimelineStore: what opening a file costs
//   * BM_ViewerPaint/Z           one full 1,920 x 1,080 frame of TimelineView at zoom Z (1: the whole
//                                run; 100, 10,000: a hundredth and a ten-thousandth of it, centred)
//   * BM_ViewerAllLanesColumns/Z the per-pixel aggregates of every lane (3,072 lanes x 1,920 px),
//                                the worst case of a frame that shows every lane
//
// The run is LLaMA-2 7B FSDP x TP 8 on 1,024 ranks, every rank recorded (synthetic_run.hpp):
// 1,057,792 op instances. Counters: op_instances, store_B_per_op (what TimelineStore adds to core's
// Timeline, per op instance), held_B_per_op (store + core's 24-byte timings), file_MiB.
#include <QApplication>
#include <QImage>
#include <QPainter>

#include <benchmark/benchmark.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "model/level_of_detail.hpp"
#include "model/timeline_store.hpp"
#include "stratsim/core/document.hpp"
#include "synthetic_run.hpp"
#include "widgets/timeline_view.hpp"

namespace {

using namespace stratsim;
using namespace stratsim::gui;

constexpr int kFrameWidth = 1920, kFrameHeight = 1080;

const std::string& timeline_file(int recorded) {
  static std::map<int, std::string> files;
  auto [it, added] = files.try_emplace(recorded);
  if (added) {
    it->second = (std::filesystem::temp_directory_path() / ("stratsim-gui-bench-" + std::to_string(recorded) + ".json"))
                     .string();
    const core::Program& program = bench::llama_fsdp_tp_program();
    std::ofstream(it->second, std::ios::binary)
        << core::timeline_json(program, bench::full_mode_run(program, recorded)).dump();
  }
  return it->second;
}

std::shared_ptr<const TimelineStore> open_store(int recorded) {
  core::Document document = core::read_document(timeline_file(recorded));
  return std::make_shared<const TimelineStore>(std::move(document.timeline));
}

const std::shared_ptr<const TimelineStore>& million_op_store() {
  static const std::shared_ptr<const TimelineStore> store = open_store(1024);
  return store;
}

double op_instances(const TimelineStore& store) {
  return static_cast<double>(store.recordedRanks()) * static_cast<double>(store.program().ops.size());
}

void BM_ViewerOpen(benchmark::State& state) {
  const int recorded = static_cast<int>(state.range(0));
  timeline_file(recorded);
  std::shared_ptr<const TimelineStore> store;
  for (auto _ : state) store = open_store(recorded);
  const double ops = op_instances(*store);
  state.counters["op_instances"] = ops;
  state.counters["store_B_per_op"] = static_cast<double>(store->memoryBytes()) / ops;
  state.counters["held_B_per_op"] = static_cast<double>(store->memoryBytes()) / ops + sizeof(core::OpTiming);
  state.counters["file_MiB"] = static_cast<double>(std::filesystem::file_size(timeline_file(recorded))) / (1 << 20);
}
BENCHMARK(BM_ViewerOpen)->Arg(64)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();

// The whole run / Z, centred on the middle of the run.
void centre_zoom(TimelineView& view, const TimelineStore& store, double zoom) {
  const double middle = 0.5 * store.makespan(), half = 0.5 * store.makespan() / zoom;
  view.setVisibleRange(middle - half, middle + half);
}

void BM_ViewerPaint(benchmark::State& state) {
  const auto& store = million_op_store();
  TimelineView view;
  view.resize(kFrameWidth, kFrameHeight);
  view.setStore(store);
  view.layout().setLaneHeight(4);
  view.relayout();
  centre_zoom(view, *store, static_cast<double>(state.range(0)));
  QImage frame(kFrameWidth, kFrameHeight, QImage::Format_RGB32);
  for (auto _ : state) {
    QPainter painter(&frame);
    view.render(painter, frame.size());
  }
  state.counters["op_instances"] = op_instances(*store);
}
BENCHMARK(BM_ViewerPaint)->Arg(1)->Arg(100)->Arg(10000)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_ViewerAllLanesColumns(benchmark::State& state) {
  const auto& store = million_op_store();
  const double zoom = static_cast<double>(state.range(0));
  const double middle = 0.5 * store->makespan(), half = 0.5 * store->makespan() / zoom;
  const Viewport viewport(middle - half, middle + half, kFrameWidth);
  for (auto _ : state)
    for (const Lane& lane : store->lanes())
      benchmark::DoNotOptimize(laneColumns(*store, lane.recorded, lane.stream, viewport).data());
  state.counters["lanes"] = static_cast<double>(store->lanes().size());
  state.counters["op_instances"] = op_instances(*store);
}
BENCHMARK(BM_ViewerAllLanesColumns)->Arg(1)->Arg(10000)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::temp_directory_path()))
    if (entry.path().filename().string().rfind("stratsim-gui-bench-", 0) == 0) std::filesystem::remove(entry.path());
  return 0;
}
