// The planner against real PyTorch: tests/data/golden/*.json hold what PyTorch issued, collective by
// collective, for generated cases (tools/golden/record_*.py recorded them under the fake process
// group; README "Golden vectors"). Every case's model and plan are planned here and each
// iteration's collectives must match in order: CommDebugMode key, group, input and output bytes,
// dtype. A case's "init" (what applying the plan issued) is PlanResult::setup. PyTorch is not needed to run this test,
// only to re-record.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "planner_test_support.hpp"

using namespace stratsim::core;
using namespace stratsim::test;

namespace {

struct GoldenCase {
  std::string file, name;
  nlohmann::json doc;
};

void PrintTo(const GoldenCase& c, std::ostream* out) { *out << c.file << ": " << c.name; }

std::vector<GoldenCase> load_cases(const std::string& file) {
  std::ifstream in(std::string(STRATSIM_TEST_DATA) + "/golden/" + file);
  const nlohmann::json doc = nlohmann::json::parse(in);
  std::vector<GoldenCase> cases;
  for (const nlohmann::json& c : doc.at("cases")) cases.push_back({file, c.at("name").get<std::string>(), c});
  return cases;
}

// One collective as the recording writes it.
std::string line(const std::string& op, const std::string& group, std::int64_t in, std::int64_t out,
                 const std::string& dtype) {
  std::ostringstream text;
  text << op << " [" << group << "] " << in << " -> " << out << " B " << dtype;
  return text.str();
}

std::vector<std::string> recorded(const nlohmann::json& iteration) {
  std::vector<std::string> lines;
  for (const nlohmann::json& c : iteration)
    lines.push_back(line(c.at("op"), c.at("group"), c.at("input_bytes"), c.at("output_bytes"), c.at("dtype")));
  return lines;
}

std::vector<std::string> planned(const IterationRecord& iteration) {
  std::vector<std::string> lines;
  for (const CollectiveRecord& c : iteration.collectives)
    lines.push_back(line(c.op, c.group, c.input_bytes, c.output_bytes, std::string(dtype_name(c.dtype))));
  return lines;
}

class Fsdp2Golden : public testing::TestWithParam<GoldenCase> {};

TEST_P(Fsdp2Golden, EveryCollectiveInOrder) {
  const nlohmann::json& c = GetParam().doc;
  const Model model = model_from_json(c.at("model"), GetParam().name + ".model");
  const Plan plan = parse_plan(JsonReader(c.at("plan"), GetParam().name + ".plan"));
  const PlanResult result = plan_training(model, plan, {});
  const nlohmann::json& iterations = c.at("iterations");
  ASSERT_EQ(result.iterations.size(), iterations.size());
  // What applying the plan issued (parallelize_module's distribute_tensor), then each micro-step.
  IterationRecord setup;
  setup.collectives = result.setup;
  EXPECT_EQ(planned(setup), c.contains("init") ? recorded(c.at("init")) : std::vector<std::string>{}) << "setup";
  for (std::size_t i = 0; i < iterations.size(); ++i)
    EXPECT_EQ(planned(result.iterations[i]), recorded(iterations[i])) << "iteration " << i + 1;
}

// Where PyTorch refused to clip the case's gradients (tools/golden/clipping.py), the planner refuses
// the same plan with max_norm in PyTorch's words (its meshes print on the "cpu" the recording ran on).
class ClipRefusalGolden : public testing::TestWithParam<GoldenCase> {};

namespace {

// The cases of `files` that hold `key` (PyTorch's words where it refused).
template <typename Files>
std::vector<GoldenCase> cases_with(const char* key, const Files& files) {
  std::vector<GoldenCase> out;
  for (const char* file : files)
    for (GoldenCase& c : load_cases(file))
      if (c.doc.contains(key)) out.push_back(std::move(c));
  return out;
}

constexpr const char* kClippedFiles[] = {"fsdp2.json", "fsdp2_tp.json", "tp_sp.json"};

}  // namespace

TEST_P(ClipRefusalGolden, FailsWherePyTorchFailed) {
  const nlohmann::json& c = GetParam().doc;
  nlohmann::json plan_doc = c.at("plan");
  plan_doc["optimizer"] = {{"max_norm", 1.0}};
  const Model model = model_from_json(c.at("model"), GetParam().name + ".model");
  const Plan plan = parse_plan(JsonReader(plan_doc, GetParam().name + ".plan"));
  std::string expected = c.at("clip_error").get<std::string>();
  for (std::size_t at = expected.find("'cpu'"); at != std::string::npos; at = expected.find("'cpu'"))
    expected.replace(at, 5, "'cuda'");
  EXPECT_EQ(plan_error([&] { plan_training(model, plan, {}); }), "optimizer.max_norm: clip_grad_norm_: " + expected);
}

INSTANTIATE_TEST_SUITE_P(Recorded, Fsdp2Golden, testing::ValuesIn(load_cases("fsdp2.json")),
                         [](const testing::TestParamInfo<GoldenCase>& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(RecordedWithTensorParallel, Fsdp2Golden, testing::ValuesIn(load_cases("fsdp2_tp.json")),
                         [](const testing::TestParamInfo<GoldenCase>& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(RecordedFsdp1, Fsdp2Golden, testing::ValuesIn(load_cases("fsdp1.json")),
                         [](const testing::TestParamInfo<GoldenCase>& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(RecordedWithSequenceParallel, Fsdp2Golden, testing::ValuesIn(load_cases("tp_sp.json")),
                         [](const testing::TestParamInfo<GoldenCase>& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(Recorded, ClipRefusalGolden, testing::ValuesIn(cases_with("clip_error", kClippedFiles)),
                         [](const testing::TestParamInfo<GoldenCase>& info) { return info.param.name; });

// The same generators with loss scaling (record_*.py --grad-scaler, tools/golden/scaling.py): every
// case's plan says optimizer.grad_scaler, unless PyTorch refused to unscale its gradients.
constexpr const char* kScaledFiles[] = {"grad_scaler_fsdp2.json", "grad_scaler_fsdp2_tp.json", "grad_scaler_tp_sp.json",
                                        "grad_scaler_fsdp1.json"};
INSTANTIATE_TEST_SUITE_P(RecordedWithGradScaler, Fsdp2Golden, testing::ValuesIn(load_cases(kScaledFiles[0])),
                         [](const testing::TestParamInfo<GoldenCase>& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(RecordedWithGradScalerAndTensorParallel, Fsdp2Golden,
                         testing::ValuesIn(load_cases(kScaledFiles[1])),
                         [](const testing::TestParamInfo<GoldenCase>& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(RecordedWithGradScalerAndSequenceParallel, Fsdp2Golden,
                         testing::ValuesIn(load_cases(kScaledFiles[2])),
                         [](const testing::TestParamInfo<GoldenCase>& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(RecordedFsdp1WithShardedGradScaler, Fsdp2Golden,
                         testing::ValuesIn(load_cases(kScaledFiles[3])),
                         [](const testing::TestParamInfo<GoldenCase>& info) { return info.param.name; });

// Where PyTorch refused to unscale (plain and DTensor gradients of one dtype), the planner refuses
// the plan with grad_scaler in PyTorch's words.
class ScalerRefusalGolden : public testing::TestWithParam<GoldenCase> {};

TEST_P(ScalerRefusalGolden, FailsWherePyTorchFailed) {
  const nlohmann::json& c = GetParam().doc;
  nlohmann::json plan_doc = c.at("plan");
  plan_doc["optimizer"]["grad_scaler"] = true;
  const Model model = model_from_json(c.at("model"), GetParam().name + ".model");
  const Plan plan = parse_plan(JsonReader(plan_doc, GetParam().name + ".plan"));
  EXPECT_EQ(plan_error([&] { plan_training(model, plan, {}); }),
            "optimizer.grad_scaler: GradScaler.unscale_: " + c.at("grad_scaler_error").get<std::string>());
}

INSTANTIATE_TEST_SUITE_P(Recorded, ScalerRefusalGolden,
                         testing::ValuesIn(cases_with("grad_scaler_error", kScaledFiles)),
                         [](const testing::TestParamInfo<GoldenCase>& info) { return info.param.name; });

// The loss-scaling recordings scale most cases and reduce found_inf: by max over DTensor gradients'
// sharded dims (FSDP2, tensor parallel, both), and over the world under FSDP1's ShardedGradScaler.
TEST(GradScalerGoldenFile, ScaledCasesReduceFoundInfAndPyTorchsRefusals) {
  int scaled = 0, refused = 0, dtensor_reductions = 0, world_reductions = 0;
  for (const char* file : kScaledFiles) {
    std::ifstream in(std::string(STRATSIM_TEST_DATA) + "/golden/" + file);
    const nlohmann::json doc = nlohmann::json::parse(in);
    EXPECT_TRUE(doc.at("recorded_with").get<std::string>().starts_with("PyTorch 2.15")) << file;
    for (const nlohmann::json& c : doc.at("cases")) {
      refused += c.contains("grad_scaler_error");
      if (!c.at("plan").contains("optimizer") || !c.at("plan").at("optimizer").value("grad_scaler", false)) continue;
      ++scaled;
      for (const nlohmann::json& iteration : c.at("iterations"))
        for (const nlohmann::json& r : iteration) {
          const bool found_inf = r.at("input_bytes") == 4 && r.at("dtype") == "float32";
          dtensor_reductions += found_inf && r.at("op") == "c10d_functional.all_reduce";
          world_reductions += found_inf && r.at("op") == "c10d.allreduce_";
        }
    }
  }
  EXPECT_GE(scaled, 60);
  EXPECT_GE(refused, 10);
  EXPECT_GE(dtensor_reductions, 60);
  EXPECT_GE(world_reductions, 16);
}

// The recording is what the README says it is: enough cases, from a current PyTorch, and covering
// what the issue asks for (HSDP, mixed precision, accumulation, several world sizes).
TEST(Fsdp2GoldenFile, CoversTheOptionsFromACurrentPyTorch) {
  std::ifstream in(std::string(STRATSIM_TEST_DATA) + "/golden/fsdp2.json");
  const nlohmann::json doc = nlohmann::json::parse(in);
  EXPECT_TRUE(doc.at("recorded_with").get<std::string>().starts_with("PyTorch 2.15"));
  int hsdp = 0, mixed = 0, accumulation = 0, explicit_reshard = 0;
  std::set<int> worlds;
  for (const nlohmann::json& c : doc.at("cases")) {
    const nlohmann::json& plan = c.at("plan");
    worlds.insert(plan.at("world_size").get<int>());
    accumulation += plan.at("gradient_accumulation_steps").get<int>() > 1;
    const nlohmann::json& first = plan.at("steps").front().front();
    hsdp += first.at("mesh_dim").size() == 2;
    mixed += first.contains("mp_policy");
    for (const nlohmann::json& step : plan.at("steps"))
      explicit_reshard += step.front().contains("reshard_after_forward");
  }
  EXPECT_GE(doc.at("cases").size(), 40u);
  EXPECT_GE(hsdp, 4);
  EXPECT_GE(mixed, 4);
  EXPECT_GE(accumulation, 4);
  EXPECT_GE(explicit_reshard, 4);
  EXPECT_GE(worlds.size(), 5u);
}

// clip_grad_norm_ as torchtitan calls it: clipped cases in the FSDP2 and torchtitan recordings, and
// refusals (plain and DTensor gradients, gradients on different meshes) in all three.
TEST(Fsdp2GoldenFile, ClippingCasesAndPyTorchsRefusals) {
  int clipped = 0, refused = 0;
  std::set<std::string> reasons;
  for (const char* file : kClippedFiles) {
    std::ifstream in(std::string(STRATSIM_TEST_DATA) + "/golden/" + file);
    const nlohmann::json doc = nlohmann::json::parse(in);
    for (const nlohmann::json& c : doc.at("cases")) {
      clipped += c.at("plan").contains("optimizer") && c.at("plan").at("optimizer").contains("max_norm");
      if (!c.contains("clip_error")) continue;
      ++refused;
      reasons.insert(c.at("clip_error").get<std::string>().substr(0, 20));
    }
  }
  EXPECT_GE(clipped, 30);
  EXPECT_GE(refused, 20);
  EXPECT_EQ(reasons.size(), 2u);  // "aten._foreach_norm.S..." and "All operands in aten..."
}

// The tensor-parallel recording: FSDP2 over Colwise/Rowwise on [dp, tp] meshes, with the setup
// scatters and broadcasts recorded.
TEST(Fsdp2GoldenFile, TensorParallelCasesRecordTheirSetup) {
  std::ifstream in(std::string(STRATSIM_TEST_DATA) + "/golden/fsdp2_tp.json");
  const nlohmann::json doc = nlohmann::json::parse(in);
  EXPECT_TRUE(doc.at("recorded_with").get<std::string>().starts_with("PyTorch 2.15"));
  int with_setup = 0, under_fsdp2 = 0;
  for (const nlohmann::json& c : doc.at("cases")) {
    with_setup += c.contains("init") && !c.at("init").empty();
    under_fsdp2 += c.at("plan").at("steps").size() > 1;
  }
  EXPECT_GE(doc.at("cases").size(), 20u);
  EXPECT_EQ(with_setup, static_cast<int>(doc.at("cases").size()));
  EXPECT_GE(under_fsdp2, 15);
}

// The FSDP1 recording covers the wrapper's options, the ones that move the reductions included.
TEST(Fsdp2GoldenFile, Fsdp1CasesCoverTheWrappersOptions) {
  std::ifstream in(std::string(STRATSIM_TEST_DATA) + "/golden/fsdp1.json");
  const nlohmann::json doc = nlohmann::json::parse(in);
  EXPECT_TRUE(doc.at("recorded_with").get<std::string>().starts_with("PyTorch 2.15"));
  std::map<std::string, int> strategies;
  int forward_prefetch = 0, backward_post = 0, mixed = 0, accumulation = 0, orig_params = 0;
  for (const nlohmann::json& c : doc.at("cases")) {
    const nlohmann::json& args = c.at("plan").at("steps").front().at("FullyShardedDataParallel");
    strategies[args.at("strategy").get<std::string>()]++;
    forward_prefetch += args.at("forward_prefetch").get<bool>();
    backward_post += args.at("backward_prefetch") == "BACKWARD_POST";
    mixed += args.contains("mixed_precision");
    orig_params += args.at("use_orig_params").get<bool>();
    accumulation += c.at("plan").at("gradient_accumulation_steps").get<int>() > 1;
  }
  EXPECT_GE(doc.at("cases").size(), 40u);
  EXPECT_EQ(strategies.size(), 4u);  // FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD
  EXPECT_GE(forward_prefetch, 8);
  EXPECT_GE(backward_post, 8);
  EXPECT_GE(mixed, 4);
  EXPECT_GE(orig_params, 10);
  EXPECT_GE(accumulation, 8);
}

// The sequence-parallel recording covers what torchtitan's plans use: SequenceParallel,
// PrepareModuleInput with either use_local_output, PrepareModuleOutput, loss_parallel, and FSDP2 on
// top with mixed precision and accumulation.
TEST(Fsdp2GoldenFile, SequenceParallelCasesCoverTorchtitansStyles) {
  std::ifstream in(std::string(STRATSIM_TEST_DATA) + "/golden/tp_sp.json");
  const nlohmann::json doc = nlohmann::json::parse(in);
  EXPECT_TRUE(doc.at("recorded_with").get<std::string>().starts_with("PyTorch 2.15"));
  int sequence_parallel = 0, prepare_output = 0, local_input = 0, loss_parallel = 0, fsdp = 0, mixed = 0,
      accumulation = 0;
  for (const nlohmann::json& c : doc.at("cases")) {
    const nlohmann::json& plan = c.at("plan");
    const std::string text = plan.dump();
    sequence_parallel += text.find("SequenceParallel") != std::string::npos;
    prepare_output += text.find("PrepareModuleOutput") != std::string::npos;
    local_input += text.find(R"("use_local_output":true)") != std::string::npos;
    loss_parallel += plan.value("loss_parallel", false);
    fsdp += text.find("torch.distributed.fsdp.fully_shard") != std::string::npos;
    mixed += text.find("bfloat16") != std::string::npos;
    accumulation += plan.at("gradient_accumulation_steps").get<int>() > 1;
  }
  EXPECT_GE(doc.at("cases").size(), 40u);
  EXPECT_GE(sequence_parallel, 20);
  EXPECT_GE(prepare_output, 3);
  EXPECT_GE(local_input, 3);
  EXPECT_GE(loss_parallel, 15);
  EXPECT_GE(fsdp, 8);
  EXPECT_GE(mixed, 3);
  EXPECT_GE(accumulation, 2);
}

}  // namespace
