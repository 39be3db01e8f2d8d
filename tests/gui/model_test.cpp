// The viewer's pure model, without widgets: time<->pixel mapping and zoom around a point, axis
// ticks, level-of-detail columns (busy fraction and dominant category, sub-pixel ops kept), lane
// layout and hit-testing, lookup, lane navigation, search and a collective's instances across
// ranks, the item models (QAbstractItemModelTester plus their values against core's figures),
// --range parsing and the program's slot layout.
#include <QAbstractItemModelTester>
#include <QtTest/QtTest>

#include "model/lane_layout.hpp"
#include "model/level_of_detail.hpp"
#include "model/program_layout.hpp"
#include "model/report_text.hpp"
#include "model/table_models.hpp"
#include "model/timeline_store.hpp"
#include "model/viewport.hpp"

using namespace stratsim;
using namespace stratsim::gui;

namespace {

// Two ranks, a 2-rank mesh. Stream 0 (compute): fwd [0,1), bwd [1,3), opt [4,5). Stream 1 (dp):
// an all-reduce [1.5,4) on rank 0, issued at 1; on rank 1 everything 0.5 s later.
core::Timeline timeline() {
  core::Program p;
  p.world_size = 2;
  p.mesh = core::DeviceMesh({2}, {"dp"});
  p.iterations = 1;
  p.streams = {"compute", "ddp"};
  p.group_id({0});
  core::ProgramOp fwd;
  fwd.name = "fc1.forward";
  fwd.module = "fc1";
  p.add(fwd);
  core::ProgramOp bwd = fwd;
  bwd.name = "fc1.backward";
  bwd.phase = core::Phase::backward;
  p.add(bwd);
  core::ProgramOp ar;
  ar.type = core::OpType::collective;
  ar.name = "ddp.bucket0";
  ar.comm_key = "c10d.allreduce_";
  ar.phase = core::Phase::backward;
  ar.stream = 1;
  ar.deps = {0};
  ar.group = 0;
  ar.bytes = 8192;
  p.add(ar);
  core::ProgramOp opt = fwd;
  opt.name = "optimizer.step";
  opt.module = "";
  opt.phase = core::Phase::optimizer;
  opt.deps = {2};
  p.add(opt);
  core::RunResult r;
  r.mode = "full";
  r.world_size = 2;
  r.recorded = {{0}, {1}};
  for (double late : {0.0, 0.5})
    r.timings.push_back({{late, late, 1 + late},
                         {1 + late, 1 + late, 3 + late},
                         {1 + late, 1.5 + late, 4 + late},
                         {4 + late, 4 + late, 5 + late}});
  r.collectives = {{2, 0, "ring", 8192, 2, 2.0, 4.5, {0, 1}}};
  r.iteration_end = {5.5};
  r.makespan = 5.5;
  return {p, r, 2};
}

// One lane of n ops of 1 ns each, back to back, alternating compute and all-gather.
core::Timeline dense_timeline(int n) {
  core::Program p;
  p.world_size = 1;
  p.mesh = core::DeviceMesh({1}, {"dp"});
  p.iterations = 1;
  p.streams = {"compute"};
  p.group_id({0});
  core::RunResult r;
  r.mode = "full";
  r.world_size = 1;
  r.recorded = {{0}};
  r.timings.emplace_back();
  for (int i = 0; i < n; ++i) {
    core::ProgramOp op;
    op.name = "op" + std::to_string(i);
    if (i % 4 == 3) {  // a quarter all-gathers
      op.type = core::OpType::collective;
      op.kind = core::CollectiveKind::all_gather;
      op.group = 0;
    }
    p.add(op);
    r.timings[0].push_back({i * 1e-9, i * 1e-9, (i + 1) * 1e-9});
  }
  r.makespan = n * 1e-9;
  r.iteration_end = {r.makespan};
  return {p, r, 2};
}

}  // namespace

class ModelTest : public QObject {
  Q_OBJECT

 private slots:
  void viewportMapsTimeToPixels_data() {
    QTest::addColumn<double>("start");
    QTest::addColumn<double>("end");
    QTest::addColumn<int>("width");
    QTest::addColumn<double>("time");
    QTest::addColumn<double>("x");
    QTest::newRow("origin") << 0.0 << 1.0 << 1000 << 0.0 << 0.0;
    QTest::newRow("middle") << 0.0 << 1.0 << 1000 << 0.5 << 500.0;
    QTest::newRow("shifted") << 2.0 << 4.0 << 100 << 3.0 << 50.0;
    QTest::newRow("before the window") << 2.0 << 4.0 << 100 << 1.0 << -50.0;
    QTest::newRow("microseconds") << 1e-6 << 3e-6 << 200 << 2.5e-6 << 150.0;
  }
  void viewportMapsTimeToPixels() {
    QFETCH(double, start);
    QFETCH(double, end);
    QFETCH(int, width);
    QFETCH(double, time);
    QFETCH(double, x);
    const Viewport v(start, end, width);
    QCOMPARE(v.xOf(time), x);
    QVERIFY(std::abs(v.timeOf(x) - time) < 1e-12 * std::max(1.0, std::abs(time)));
  }

  void zoomKeepsTheTimeUnderTheAnchor() {
    Viewport v(0, 10, 1000);
    const double anchor_time = v.timeOf(250);
    v.zoom(4, 250);
    QCOMPARE(v.duration(), 2.5);
    QVERIFY(std::abs(v.timeOf(250) - anchor_time) < 1e-12);
    v.zoom(0.5, 900);
    QCOMPARE(v.duration(), 5.0);
    const double before = v.start();
    v.pan(100);  // 100 px of 5 ms per px
    QVERIFY(std::abs(v.start() - (before + 0.5)) < 1e-12);
    v.zoom(1e30, 0);
    QVERIFY(std::abs(v.duration() - Viewport::kMinimumDuration) < 1e-15);
  }

  void clampKeepsTheViewNearTheRun() {
    Viewport v(-50, -40, 100);
    v.clampTo(10);
    QVERIFY(v.start() >= -0.25 - 1e-12);
    QCOMPARE(v.duration(), 10.0);
    Viewport wide(0, 1000, 100);
    wide.clampTo(10);
    QVERIFY(wide.duration() <= 10.5 + 1e-12);
  }

  void ticksFollowTheZoomWithItsUnit() {
    const std::vector<Tick> ms = ticks(Viewport(0, 10e-3, 1000), 100);
    QVERIFY(ms.size() >= 10);
    QCOMPARE(ms[1].label, QStringLiteral("1 ms"));
    QCOMPARE(ms[1].time, 1e-3);
    const std::vector<Tick> us = ticks(Viewport(1e-3, 1.0005e-3, 1000), 100);
    QVERIFY(!us.empty());
    QCOMPARE(us[0].label, QStringLiteral("1.0000 ms"));  // 100 ns steps, read in the window's unit
    QCOMPARE(us[1].label, QStringLiteral("1.0001 ms"));
    const std::vector<Tick> ns = ticks(Viewport(0, 40e-9, 400), 100);
    QCOMPARE(ns[1].label, QStringLiteral("10 ns"));
    QCOMPARE(formatTime(1.5e-3), QStringLiteral("1.5 ms"));
    QCOMPARE(formatTime(0), QStringLiteral("0 s"));
  }

  void columnsShowEachOpWhenZoomedIn() {
    const TimelineStore store(timeline());
    // 10 px for 5 s: 0.5 s per pixel. Rank 0 compute: fwd covers px 0-1, bwd 2-5, opt 8-9.
    const std::vector<PixelColumn> c = laneColumns(store, 0, 0, Viewport(0, 5, 10));
    QCOMPARE(c[0].op, 0);
    QCOMPARE(c[1].op, 0);
    QCOMPARE(c[2].op, 1);
    QCOMPARE(c[5].op, 1);
    QCOMPARE(c[6].busy, 0.0f);
    QCOMPARE(c[7].busy, 0.0f);
    QCOMPARE(c[8].op, 3);
    QCOMPARE(c[0].busy, 1.0f);
    const std::vector<PixelColumn> dp = laneColumns(store, 0, 1, Viewport(0, 5, 10));
    QCOMPARE(dp[4].dominant, Category::all_reduce);
    QCOMPARE(dp[3].busy, 1.0f);
    QCOMPARE(dp[2].busy, 0.0f);
    QCOMPARE(columnRuns(c).size(), std::size_t(3));
  }

  // Every collective kind has its own category (a setup scatter included), named as the core
  // names the kind, and a column it fills is dominated by it.
  void everyCollectiveKindHasItsCategory() {
    core::Timeline t = timeline();
    t.program.ops[2].kind = core::CollectiveKind::scatter;
    const TimelineStore store(t);
    const std::vector<PixelColumn> dp = laneColumns(store, 0, 1, Viewport(0, 5, 10));
    QCOMPARE(dp[4].dominant, Category::scatter);
    QCOMPARE(category_name(Category::scatter), QStringLiteral("scatter"));
  }

  void subPixelOpsAddUpAndKeepTheirColour() {
    // 100,000 ops of 1 ns in 100 us, drawn 100 px wide: each column holds 1,000 ops, all busy.
    const TimelineStore store(dense_timeline(100000));
    const std::vector<PixelColumn> c = laneColumns(store, 0, 0, Viewport(0, 100e-6, 100));
    for (const PixelColumn& column : c) {
      QVERIFY(std::abs(column.busy - 1.0f) < 1e-3);
      QCOMPARE(column.op, -1);
      QCOMPARE(column.dominant, Category::compute);  // three compute ops for each all-gather
    }
    // Half the window past the run's end: the second half of the columns is empty.
    const std::vector<PixelColumn> half = laneColumns(store, 0, 0, Viewport(50e-6, 150e-6, 100));
    QVERIFY(half[10].busy > 0.99f);
    QCOMPARE(half[60].busy, 0.0f);
    // 4 ops per column (the exact path, a few ops per pixel): several ops, so no single op named.
    const std::vector<PixelColumn> mixed = laneColumns(store, 0, 0, Viewport(0, 16e-9, 4));
    for (const PixelColumn& column : mixed) {
      QCOMPARE(column.op, -1);
      QCOMPARE(column.dominant, Category::compute);
      QVERIFY(std::abs(column.busy - 1.0f) < 1e-3);
    }
    // Zoomed to 4 ops over 4 px: each column is one op, the all-gather in its own colour.
    const std::vector<PixelColumn> four = laneColumns(store, 0, 0, Viewport(0, 4e-9, 4));
    QCOMPARE(four[3].op, 3);
    QCOMPARE(four[3].dominant, Category::all_gather);
  }

  void aLoneTinyOpStillMarksItsColumn() {
    core::Timeline t = timeline();
    t.result.timings[0][3] = {4, 4, 4 + 1e-9};  // optimizer: 1 ns in a 0.5 s column
    const TimelineStore store(std::move(t));
    const std::vector<PixelColumn> c = laneColumns(store, 0, 0, Viewport(0, 5, 10));
    QVERIFY(c[8].busy > 0);
    QCOMPARE(c[8].op, 3);
  }

  void laneLayoutCollapsesAndHitTests() {
    LaneLayout layout;
    layout.reset(3, 2);
    QCOMPARE(layout.rows().size(), std::size_t(9));
    QCOMPARE(layout.totalHeight(), 3 * (LaneLayout::kHeaderHeight + 2 * LaneLayout::kDefaultLaneHeight));
    layout.toggle(1);
    QVERIFY(layout.collapsed(1));
    QCOMPARE(layout.rows().size(), std::size_t(7));
    QVERIFY(layout.laneRow(1, 0) == nullptr);
    const LaneRow* row = layout.laneRow(2, 1);
    QVERIFY(row);
    QCOMPARE(layout.rowAt(row->y + 1), row);
    QCOMPARE(layout.rowAt(row->y + row->height - 1), row);
    QVERIFY(layout.rowAt(layout.totalHeight()) == nullptr);
    QVERIFY(layout.rowAt(-1) == nullptr);
    const LaneRow* header = layout.rowAt(LaneLayout::kHeaderHeight + 2 * LaneLayout::kDefaultLaneHeight);
    QVERIFY(header && header->header && header->recorded == 1);
  }

  void storeFindsNavigatesAndLinksInstances() {
    const TimelineStore store(timeline());
    QCOMPARE(store.opAt(0, 0, 2.0, 0), (OpRef{0, 1}));
    QCOMPARE(store.opAt(1, 0, 0.75, 0), (OpRef{1, 0}));
    QVERIFY(!store.opAt(0, 0, 3.5, 0.1).valid());
    QCOMPARE(store.opAt(0, 0, 3.5, 0.6), (OpRef{0, 1}));  // nearest within the slack
    QCOMPARE(store.nextOnLane({0, 0}), (OpRef{0, 1}));
    QCOMPARE(store.nextOnLane({0, 1}), (OpRef{0, 3}));  // the all-reduce is on another lane
    QVERIFY(!store.nextOnLane({0, 3}).valid());
    QCOMPARE(store.previousOnLane({1, 3}), (OpRef{1, 1}));
    QVERIFY(!store.previousOnLane({1, 0}).valid());
    const std::vector<OpRef> found = store.find(QStringLiteral("FC1"));
    QCOMPARE(found.size(), std::size_t(4));  // forward and backward on two ranks
    QCOMPARE(found.front(), (OpRef{0, 0}));
    QCOMPARE(store.find(QStringLiteral("all_reduce")).size(), std::size_t(2));
    QCOMPARE(store.instancesOf({0, 2}), (std::vector<OpRef>{{0, 2}, {1, 2}}));
    QCOMPARE(store.instancesOf({1, 0}), (std::vector<OpRef>{{1, 0}}));
    QCOMPARE(store.dependantsOf({0, 2}), (std::vector<OpRef>{{0, 3}}));
    QCOMPARE(store.rankLabel(1), QStringLiteral("rank 1"));
  }

  void memoryPerOpIsSmall() {
    const TimelineStore store(dense_timeline(100000));
    // Beyond core's own 24 bytes per timing: prefix sums and indexes, well under 200 B per op.
    QVERIFY2(store.memoryBytes() < 64 * 100000, qPrintable(QString::number(store.memoryBytes())));
  }

  void countsModelGroupsAndPassesTheTester() {
    core::Timeline t = timeline();
    CountsModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setProgram(&t.program);
    QCOMPARE(model.rowCount(), 1);
    QCOMPARE(model.data(model.index(0, CountsModel::comm_key)).toString(), QStringLiteral("c10d.allreduce_"));
    QCOMPARE(model.data(model.index(0, CountsModel::count)).toInt(), 1);
    QCOMPARE(model.data(model.index(0, CountsModel::bytes), kRawValueRole).toLongLong(), 8192);
    QCOMPARE(model.data(model.index(0, CountsModel::group)).toString(), QStringLiteral("dp"));
    QCOMPARE(model.opsOfRow(0), std::vector<int>{2});
    model.setProgram(nullptr);
    QCOMPARE(model.rowCount(), 0);
  }

  void rangeModelShowsCoresWindowFigures() {
    auto store = std::make_shared<const TimelineStore>(timeline());
    RangeStatsModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setStore(store);
    QCOMPARE(model.rowCount(), 2);
    QCOMPARE(model.columnCount(), RangeStatsModel::first_stream + 2);
    QCOMPARE(model.headerData(RangeStatsModel::first_stream + 1, Qt::Horizontal).toString(),
             QStringLiteral("busy: ddp"));
    model.setRange(std::make_pair(2.0, 4.5));
    const std::vector<core::RankStats> expected = core::analyse_window(store->program(), store->result(), 2.0, 4.5);
    for (int row = 0; row < 2; ++row) {
      QCOMPARE(model.data(model.index(row, RangeStatsModel::compute), kRawValueRole).toDouble(), expected[row].compute);
      QCOMPARE(model.data(model.index(row, RangeStatsModel::exposed), kRawValueRole).toDouble(),
               expected[row].exposed_communication);
      QCOMPARE(model.data(model.index(row, RangeStatsModel::overlap), kRawValueRole).toDouble(), expected[row].overlap);
      QCOMPARE(model.data(model.index(row, RangeStatsModel::first_stream + 1), kRawValueRole).toDouble(),
               expected[row].streams[1].busy);
    }
    QCOMPARE(model.data(model.index(0, RangeStatsModel::compute), kRawValueRole).toDouble(), 1.5);
    model.setRange(std::nullopt);
    QCOMPARE(model.range(), std::make_pair(0.0, 5.5));
    QCOMPARE(model.data(model.index(0, RangeStatsModel::compute), kRawValueRole).toDouble(),
             store->analysis().ranks[0].compute);
  }

  void collectivesModelPassesTheTester() {
    auto store = std::make_shared<const TimelineStore>(timeline());
    CollectivesModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setStore(store);
    QCOMPARE(model.rowCount(), 1);
    QCOMPARE(model.data(model.index(0, CollectivesModel::algorithm)).toString(), QStringLiteral("ring"));
    QCOMPARE(model.data(model.index(0, CollectivesModel::busbw), kRawValueRole).toDouble(),
             store->analysis().collectives[0].busbw);
  }

  void rangesParseWithUnits() {
    QCOMPARE(parseRange(QStringLiteral("1.5ms:3ms")), std::make_optional(std::make_pair(1.5e-3, 3e-3)));
    QCOMPARE(parseRange(QStringLiteral("0.001:0.002")), std::make_optional(std::make_pair(0.001, 0.002)));
    QCOMPARE(parseRange(QStringLiteral("250us:1 ms")), std::make_optional(std::make_pair(250e-6, 1e-3)));
    QCOMPARE(parseRange(QStringLiteral("3ms:1ms")), std::nullopt);
    QCOMPARE(parseRange(QStringLiteral("1ms")), std::nullopt);
    QCOMPARE(parseRange(QStringLiteral("a:b")), std::nullopt);
    QCOMPARE(parseTime(QStringLiteral("2e-3 s")), std::make_optional(2e-3));
  }

  void programsGetSlotsThatRespectStreamsAndDependencies() {
    core::Timeline t = timeline();
    const core::Timeline laid_out = unscheduledTimeline(t.program);
    const auto& s = laid_out.result.timings[0];
    QCOMPARE(s[0].start, 0.0);
    QCOMPARE(s[1].start, kSlotSeconds);      // after fwd on its stream
    QCOMPARE(s[2].start, kSlotSeconds);      // after its dependency fwd
    QCOMPARE(s[3].start, 2 * kSlotSeconds);  // after bwd and the all-reduce
    QCOMPARE(laid_out.result.mode, std::string("unscheduled"));
    const TimelineStore store(laid_out);  // and the store accepts it
    QCOMPARE(store.recordedRanks(), 1);
  }
};

QTEST_MAIN(ModelTest)
#include "model_test.moc"
