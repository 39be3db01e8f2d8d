// The op graph: container forwards that name tensors (branches, residual adds, gating multiplies,
// concatenation), attention's q/k/v inputs and fused/unfused kernels, the loss, and the memory
// the graph keeps alive. Chain forwards keep their meaning.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "planner_test_support.hpp"
#include "stratsim/core/errors.hpp"

namespace stratsim::test {
namespace {

using json = nlohmann::json;

json linear(const std::string& name, int in, int out) {
  return {{"name", name}, {"type", "Linear"}, {"in_features", in}, {"out_features", out}, {"bias", false}};
}
json call(const std::string& child, json in, const std::string& out) {
  return {{"call", child}, {"in", in}, {"out", out}};
}
json join(const std::string& op, json in, const std::string& out) { return {{"op", op}, {"in", in}, {"out", out}}; }

// y = c(a(x)) + b(a(x)): a's output is read twice.
json diamond(const std::string& op = "add") {
  return {{"name", "Diamond"},
          {"modules", {linear("a", 4, 8), linear("b", 8, 8), linear("c", 8, 8)}},
          {"forward", {call("a", "x", "h"), call("b", "h", "p"), call("c", "h", "q"), join(op, {"p", "q"}, "y")}}};
}

const char* kLocal = R"({"world_size": 1, "batch_size": 2, "steps": []})";

std::vector<const core::ProgramOp*> compute_ops(const PlanResult& result, int iteration = 1) {
  std::vector<const core::ProgramOp*> ops;
  for (const core::ProgramOp& op : result.program.ops)
    if (op.type == core::OpType::compute && op.iteration == iteration) ops.push_back(&op);
  return ops;
}

int position(const std::vector<const core::ProgramOp*>& ops, const std::string& name) {
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (ops[i]->name == name) return static_cast<int>(i);
  return -1;
}

std::string input_error(const json& doc) {
  try {
    model_from_json(doc);
  } catch (const core::InputError& e) {
    return e.what();
  }
  return "";
}

TEST(OpGraph, ParsesSlotsUsesAndResult) {
  const Model model = model_from_json(diamond());
  const core::Module& root = model.root();
  EXPECT_TRUE(root.graph);
  EXPECT_EQ(root.tensors, (std::vector<std::string>{"x", "h", "p", "q", "y"}));
  ASSERT_EQ(root.forward.size(), 4u);
  EXPECT_EQ(root.forward[0].output_uses, 2);  // h feeds b and c
  EXPECT_EQ(root.forward[1].output_uses, 1);
  EXPECT_EQ(root.forward[3].kind, core::ForwardStep::Kind::join);
  EXPECT_EQ(root.forward[3].inputs, (std::vector<int>{2, 3}));
  EXPECT_EQ(root.result, 4);
  EXPECT_EQ(root.forward[3].output_uses, 1);  // the result, read by the caller
  EXPECT_EQ(root.input_uses, 1);
}

TEST(OpGraph, ChainForwardsAreUnchanged) {
  const Model model = core::load_model("zoo:UnitModule");
  for (const core::Module& m : model.modules) {
    EXPECT_FALSE(m.graph) << m.fqn;
    for (const core::ForwardStep& step : m.forward) {
      EXPECT_EQ(step.inputs, std::vector<int>{0});
      EXPECT_EQ(step.output, 0);
      EXPECT_EQ(step.output_uses, 1);
    }
  }
}

TEST(OpGraph, RebindingANameStartsANewVersion) {
  // x = x + a reads the block input once more; the rebound x is read by the next add only.
  json doc = {{"name", "Res"},
              {"modules", {linear("a", 4, 4), linear("b", 4, 4)}},
              {"forward",
               {call("a", "x", "h"), join("add", {"x", "h"}, "x"), call("b", "x", "h"), join("add", {"x", "h"}, "x")}}};
  const Model model = model_from_json(doc);
  EXPECT_EQ(model.root().input_uses, 2);
  EXPECT_EQ(model.root().forward[1].output_uses, 2);  // read by b and the second add
  EXPECT_EQ(model.root().forward[3].output_uses, 1);
}

TEST(OpGraph, BadStepsAreClearErrors) {
  json doc = diamond();
  doc["forward"][1]["in"] = "k";
  EXPECT_EQ(input_error(doc),
            "model.json: forward[1].in: no tensor \"k\" yet (the input is \"x\"; tensors so far: x, h)");
  doc = diamond();
  doc["forward"][3] = join("sub", {"p", "q"}, "y");
  EXPECT_EQ(input_error(doc), "model.json: forward[3].op: unknown op \"sub\" (expected add, mul or concat)");
  doc = diamond();
  doc["forward"][3] = join("add", {"p"}, "y");
  EXPECT_EQ(input_error(doc), "model.json: forward[3].in: add joins two or more tensors, got 1");
  doc = diamond();
  doc["forward"][1] = call("b", {"h", "x"}, "p");
  EXPECT_EQ(input_error(doc), "model.json: forward[1].in: Linear takes one input tensor, got 2");
  doc = diamond();
  doc["forward"][1].erase("out");
  EXPECT_EQ(input_error(doc), "model.json: forward[1]: required field \"out\" is missing (the tensor the step writes)");
  doc = diamond();
  doc["forward"][1]["op"] = "add";
  EXPECT_EQ(input_error(doc), "model.json: forward[1]: a forward step object needs exactly one of \"call\" or \"op\"");
  doc = diamond();
  doc["forward"][0]["call"] = "z";
  EXPECT_EQ(input_error(doc),
            "model.json: forward[0].call: \"z\" is neither a child module nor a parameter of this module");
}

TEST(OpGraph, AJoinOfDifferentShapesIsAPlanError) {
  json doc = diamond();
  doc["modules"][2]["out_features"] = 6;
  const Model model = model_from_json(doc);
  EXPECT_EQ(plan_error([&] { run_plan(model, kLocal); }),
            "Diamond: forward add of p and q: shapes [2, 8] and [2, 6] differ on this rank");
  doc["forward"][3] = join("concat", {"p", "q"}, "y");
  const PlanResult result = run_plan(model_from_json(doc), kLocal, 0, 1);
  const auto ops = compute_ops(result);
  const int cat = position(ops, "Diamond.concat.y.forward");
  ASSERT_GE(cat, 0);
  EXPECT_EQ(ops[cat]->bytes_accessed, 2 * 2 * 14 * 4);  // reads and writes [2, 14] float32
}

// A tensor read twice gets its two gradients summed after both readers' backward ran and before
// its producer's backward.
TEST(OpGraph, BranchGradientsAreSummedBetweenReadersAndProducer) {
  const PlanResult result = run_plan(model_from_json(diamond()), kLocal, 0, 1);
  const auto ops = compute_ops(result);
  const int sum = position(ops, "Diamond.h.grad_accumulate");
  ASSERT_GE(sum, 0);
  EXPECT_EQ(ops[sum]->phase, Phase::backward);
  EXPECT_EQ(ops[sum]->bytes_accessed, 3 * 2 * 8 * 4);
  EXPECT_GT(sum, position(ops, "b.backward"));
  EXPECT_GT(sum, position(ops, "c.backward"));
  EXPECT_LT(sum, position(ops, "a.backward"));
  // The residual add has no backward kernel; it is the only join.
  EXPECT_EQ(position(ops, "Diamond.add.y.backward"), -1);
  EXPECT_GE(position(ops, "Diamond.add.y.forward"), 0);
}

// b and c save the same tensor (a's output): it is held once. With mul, the join also saves p and q.
TEST(OpGraph, ASavedTensorIsHeldOnce) {
  const std::int64_t x = 2 * 4 * 4, h = 2 * 8 * 4, p = 2 * 8 * 4;
  EXPECT_EQ(run_plan(model_from_json(diamond("add")), kLocal, 0, 1).memory.activations, x + h);
  EXPECT_EQ(run_plan(model_from_json(diamond("mul")), kLocal, 0, 1).memory.activations, x + h + 2 * p);
}

// The model input is one tensor however many ops save it; a product of tensors that need no
// gradient saves nothing (it would never be released).
TEST(OpGraph, InputsAreSharedAndGradlessProductsSaveNothing) {
  json two = {{"name", "Two"},
              {"modules", {linear("a", 4, 8), linear("b", 4, 8)}},
              {"forward", {call("a", "x", "p"), call("b", "x", "q"), join("add", {"p", "q"}, "y")}}};
  EXPECT_EQ(run_plan(model_from_json(two), kLocal, 0, 1).memory.activations, 2 * 4 * 4);
  json gate = {
      {"name", "Gate"},
      {"modules", {{{"name", "r"}, {"type", "ReLU"}}, {{"name", "s"}, {"type", "Sigmoid"}}, linear("fc", 4, 4)}},
      {"input_features", 4},
      {"forward", {call("r", "x", "a"), call("s", "x", "b"), join("mul", {"a", "b"}, "g"), call("fc", "g", "y")}}};
  const PlanResult one = run_plan(model_from_json(gate), kLocal, 0, 1);
  const PlanResult four = run_plan(model_from_json(gate), kLocal, 0, 4);
  EXPECT_EQ(one.memory.activations, four.memory.activations);
  // ReLU and Sigmoid keep their outputs (they need no gradient either, but the leaf's backward
  // entry releases them); fc keeps the product.
  EXPECT_EQ(one.memory.activations, 3 * 2 * 4 * 4);
}

TEST(OpGraph, TransformerBlocksBranchAndJoin) {
  const Model model = core::load_model("zoo:gpt:layers=2,hidden=64,heads=4,kv_heads=2,ffn=128,vocab=100,seq=16");
  const PlanResult result = run_plan(model, kLocal, 0, 1);
  const auto ops = compute_ops(result);
  for (const char* name :
       {"layers.0.add.x.forward", "layers.0.feed_forward.mul.g.forward", "layers.0.feed_forward.mul.g.backward",
        "layers.0.x.grad_accumulate", "layers.0.attention.x.grad_accumulate", "layers.0.feed_forward.x.grad_accumulate",
        "layers.1.attention.rope.forward", "loss.forward", "loss.backward"})
    EXPECT_GE(position(ops, name), 0) << name;
  // Four branches per block: its input, the residual after attention, attention's and the FFN's input.
  EXPECT_EQ(std::count_if(ops.begin(), ops.end(),
                          [](const core::ProgramOp* op) { return op->name.ends_with(".grad_accumulate"); }),
            8);
  // The loss is the first backward op. torchtitan's block repeats k and v (2 of 4 heads) to the
  // query heads first, so attention reads them at the full width.
  const auto first_backward =
      std::find_if(ops.begin(), ops.end(), [](auto* op) { return op->phase == Phase::backward; });
  EXPECT_EQ((*first_backward)->name, "loss.backward");
  const core::ProgramOp* sdpa = ops[position(ops, "layers.0.attention.sdpa.forward")];
  const std::int64_t t = 2 * 16;
  EXPECT_EQ(sdpa->bytes_accessed, (2 * t * 64 + 2 * t * 64) * 4 + 2 * 4 * 16 * 4);
  const int repeat = position(ops, "layers.0.attention.sdpa.repeat_kv.forward");
  ASSERT_GE(repeat, 0);
  EXPECT_EQ(repeat + 1, position(ops, "layers.0.attention.sdpa.forward"));  // just before the kernel
  EXPECT_EQ(ops[repeat]->op_class, "strided_copy");
  EXPECT_EQ(ops[repeat]->bytes_accessed, 2 * (t * 32 + t * 64) * 4);
  EXPECT_EQ(ops[position(ops, "layers.0.attention.sdpa.repeat_kv.backward")]->op_class, "norm");
}

// One attention block: q from wq (4 heads of 8), k and v from wk and wv (2 heads), SDPA as `sdpa`.
json gqa_attention(json sdpa) {
  return {{"name", "Attn"},
          {"dtype", "float32"},
          {"seq_len", 16},
          {"input_features", 32},
          {"modules", {linear("wq", 32, 32), linear("wk", 32, 16), linear("wv", 32, 16), sdpa, linear("wo", 32, 32)}},
          {"forward",
           {call("wq", "x", "q"), call("wk", "x", "k"), call("wv", "x", "v"), call("sdpa", {"q", "k", "v"}, "o"),
            call("wo", "o", "y")}}};
}

json sdpa_leaf(int kv_heads) {
  return {{"name", "sdpa"},       {"type", "SDPA"}, {"heads", 4},
          {"kv_heads", kv_heads}, {"head_dim", 8},  {"functional", true}};
}

// SDPA reading the KV heads itself (enable_gqa) moves and keeps the narrow k and v; repeat_kv
// copies them out to the query heads, which the kernel then reads and keeps. An exported model
// says the same by SDPA seeing 4 KV heads where the graph's k has 2: the expand and reshape the
// exporter passed through were repeat_kv.
TEST(OpGraph, RepeatKvCopiesKeysAndValuesToTheQueryHeads) {
  json repeated = sdpa_leaf(2);
  repeated["repeat_kv"] = true;
  const PlanResult native = run_plan(model_from_json(gqa_attention(sdpa_leaf(2))), kLocal, 0, 1);
  const PlanResult repeat = run_plan(model_from_json(gqa_attention(repeated)), kLocal, 0, 1);
  const PlanResult exported = run_plan(model_from_json(gqa_attention(sdpa_leaf(4))), kLocal, 0, 1);
  const std::int64_t t = 2 * 16, lse = 2 * 4 * 16 * 4;
  const auto sdpa_bytes = [](const PlanResult& r) {
    const auto ops = compute_ops(r);
    return ops[position(ops, "sdpa.forward")]->bytes_accessed;
  };
  EXPECT_EQ(sdpa_bytes(native), (2 * t * 32 + 2 * t * 16) * 4 + lse);
  EXPECT_EQ(sdpa_bytes(repeat), (2 * t * 32 + 2 * t * 32) * 4 + lse);
  EXPECT_EQ(sdpa_bytes(exported), sdpa_bytes(repeat));
  EXPECT_LT(position(compute_ops(native), "sdpa.repeat_kv.forward"), 0);
  EXPECT_GE(position(compute_ops(exported), "sdpa.repeat_kv.forward"), 0);
  // Saved: x (shared by wq, wk, wv), q, k and v, the output (wo's input) and the log-sum-exp.
  EXPECT_EQ(native.memory.activations, (t * 32 + t * 32 + 2 * t * 16 + t * 32) * 4 + lse);
  EXPECT_EQ(repeat.memory.activations, (t * 32 + t * 32 + 2 * t * 32 + t * 32) * 4 + lse);
  EXPECT_EQ(exported.memory.activations, repeat.memory.activations);
  // Without kv_heads nothing says SDPA saw repeated heads: a narrower k is read as it is.
  json unnamed = sdpa_leaf(4);
  unnamed.erase("kv_heads");
  EXPECT_EQ(sdpa_bytes(run_plan(model_from_json(gqa_attention(unnamed)), kLocal, 0, 1)), sdpa_bytes(native));
  json nothing_to_repeat = gqa_attention(sdpa_leaf(4));
  nothing_to_repeat["modules"][3]["repeat_kv"] = true;
  EXPECT_EQ(input_error(nothing_to_repeat),
            "model.json: modules[3].repeat_kv: needs kv_heads below heads (both are 4): there is nothing to repeat");
}

TEST(OpGraph, CrossEntropySavesFloat32LogProbabilities) {
  json doc = {
      {"name", "Head"},
      {"dtype", "bfloat16"},
      {"modules", {linear("lm", 8, 100), {{"name", "loss"}, {"type", "CrossEntropyLoss"}, {"functional", true}}}}};
  const PlanResult result = run_plan(model_from_json(doc), kLocal, 0, 1);
  const std::int64_t t = 2;
  // lm saves its bfloat16 input; the loss its float32 log-probabilities and int64 labels.
  EXPECT_EQ(result.memory.activations, t * 8 * 2 + t * 100 * 4 + t * 8);
}

// log_softmax reads a row once where it fits a block's shared memory (under 12,256 float32) and
// three times where it does not, then writes it; backward reads the gradient and the output once,
// or the gradient twice more. The cast to float32 and back, and NLL's one-hot gradient, add theirs.
TEST(OpGraph, CrossEntropyTrafficFollowsTheSoftmaxKernelsPasses) {
  for (const std::int64_t vocab : {1000, 12255, 12256, 128256}) {
    const std::int64_t t = 2, n = t * vocab;
    json doc = {
        {"name", "Head"},
        {"dtype", "bfloat16"},
        {"modules", {linear("lm", 8, vocab), {{"name", "loss"}, {"type", "CrossEntropyLoss"}, {"functional", true}}}}};
    const PlanResult result = run_plan(model_from_json(doc), kLocal, 0, 1);
    const auto bytes_of = [&](const std::string& name) {
      const auto& ops = result.program.ops;
      const auto it = std::find_if(ops.begin(), ops.end(), [&](const auto& op) { return op.name == name; });
      EXPECT_NE(it, ops.end()) << name;
      return it == ops.end() ? std::int64_t{-1} : it->bytes_accessed;
    };
    const bool fits = vocab < 12256;
    const std::int64_t cast = n * (2 + 4);
    EXPECT_EQ(bytes_of("loss.forward"), (fits ? 2 : 4) * n * 4) << vocab;
    // logits.float() is PyTorch's unvectorised conversion kernel, priced as its own class.
    EXPECT_EQ(bytes_of("loss.cast.forward"), cast) << vocab;
    EXPECT_EQ(bytes_of("loss.backward"), n * 4 + (fits ? 3 : 4) * n * 4 + cast) << vocab;
  }
}

// The loss's temporaries over the vocabulary (t x V float32 twice in backward: NLL's gradient and
// log_softmax's) are the step's peak in a language model (measured on an H100 at 15.1 GiB above
// the saved tensors for Llama 3.1 8B: benchmarks/accuracy/gpu/).
TEST(OpGraph, TheLossBackwardHoldsTwoFloat32GradientsOverTheVocabulary) {
  const std::int64_t vocab = 100000, t = 2;
  json doc = {
      {"name", "Head"},
      {"dtype", "bfloat16"},
      {"modules", {linear("lm", 8, vocab), {{"name", "loss"}, {"type", "CrossEntropyLoss"}, {"functional", true}}}}};
  const PlanResult result = run_plan(model_from_json(doc), kLocal, 0, 1);
  EXPECT_EQ(result.memory.peak_at, "iteration 1 loss.backward");
  const std::int64_t held = result.memory.parameters + result.memory.optimizer_state + result.memory.activations;
  const std::int64_t loss = 4;  // the mean, a float32 scalar, alive while backward runs
  EXPECT_EQ(result.memory.peak - held, 2 * t * vocab * 4 + loss);
  // The report says so: at the peak, outputs and temporaries are those two and the loss.
  EXPECT_EQ(result.memory.at_peak.outputs_and_temporaries, 2 * t * vocab * 4 + loss);
  EXPECT_EQ(result.memory.at_peak.activations, result.memory.activations);
}

json attention_model(bool fused, double dropout) {
  json sdpa = {{"name", "sdpa"}, {"type", "SDPA"}, {"heads", 2},
               {"head_dim", 4},  {"fused", fused}, {"dropout", dropout}};
  return {{"name", "Attn"},
          {"seq_len", 16},
          {"modules", {linear("wq", 8, 8), linear("wk", 8, 8), linear("wv", 8, 8), sdpa, linear("wo", 8, 8)}},
          {"forward",
           {call("wq", "x", "q"), call("wk", "x", "k"), call("wv", "x", "v"), call("sdpa", {"q", "k", "v"}, "o"),
            call("wo", "o", "o")}}};
}

TEST(OpGraph, UnfusedAttentionMaterialisesTheScores) {
  const PlanResult fused = run_plan(model_from_json(attention_model(true, 0)), kLocal, 0, 1);
  const PlanResult math = run_plan(model_from_json(attention_model(false, 0.1)), kLocal, 0, 1);
  const auto ops = compute_ops(math);
  const core::ProgramOp* forward = ops[position(ops, "sdpa.forward")];
  EXPECT_EQ(forward->gemms.size(), 2u);
  EXPECT_EQ(forward->gemms[0], (core::GemmShape{2 * 2 * 16, 16, 4}));
  EXPECT_EQ(ops[position(ops, "sdpa.backward")]->gemms.size(), 4u);
  EXPECT_GE(position(ops, "sdpa.softmax.forward"), 0);
  EXPECT_GE(position(ops, "sdpa.softmax.backward"), 0);
  EXPECT_EQ(position(compute_ops(fused), "sdpa.softmax.forward"), -1);
  // The math path keeps the [2, 2, 16, 16] probabilities, the dropped probabilities and the
  // dropout mask, flash its log-sum-exp (and its output, which wo saves anyway: held once).
  const std::int64_t scores = 2 * 2 * 16 * 16;
  const std::int64_t lse = 2 * 2 * 16 * 4;
  EXPECT_EQ(math.memory.activations - fused.memory.activations, 2 * scores * 4 + scores - lse);
  // The traffic over the float32 scores. Forward: the causal mask's add, softmax and dropout each
  // read and write them (dropout writes its one-byte mask too); without the mask, two passes.
  // Backward: dropout's (the gradient, the mask, the result) and softmax's (gradient, output,
  // result) kernels; the GEMMs write dp, read p and read ds twice, beside q, k, v and o.
  const auto bytes = [&](const PlanResult& r, const std::string& name) {
    const auto all = compute_ops(r);
    const int at = position(all, name);
    return at < 0 ? std::int64_t{-1} : all[at]->bytes_accessed;
  };
  EXPECT_EQ(ops[position(ops, "sdpa.softmax.forward")]->op_class, "attention_scores");
  EXPECT_EQ(ops[position(ops, "sdpa.softmax.backward")]->op_class, "attention_scores");
  EXPECT_EQ(bytes(math, "sdpa.softmax.forward"), 3 * 2 * scores * 4 + scores);
  EXPECT_EQ(bytes(math, "sdpa.softmax.backward"), 3 * scores * 4 + scores + 3 * scores * 4);
  const std::int64_t t = 2 * 16, width = 8;
  EXPECT_EQ(bytes(math, "sdpa.backward"), (4 * t * width + t * width + 3 * t * width) * 4 + 4 * scores * 4);
  json bidirectional = attention_model(false, 0.1);
  bidirectional["modules"][3]["causal"] = false;
  EXPECT_EQ(bytes(run_plan(model_from_json(bidirectional), kLocal, 0, 1), "sdpa.softmax.forward"),
            2 * 2 * scores * 4 + scores);
}

// Checkpointing a graph block recomputes it under its first-pass tensor ids: memory returns to
// where it started, and the last of several iterations peaks where the first did.
TEST(OpGraph, CheckpointedGraphBlocksReleaseWhatTheySave) {
  const std::string model = "zoo:gpt:layers=2,hidden=64,heads=4,ffn=128,vocab=100,seq=16";
  const std::string plan = R"({"world_size": 1, "batch_size": 2,
      "steps": [{"checkpoint": {"module": "layers.0"}}, {"checkpoint": {"module": "layers.1.feed_forward"}}]})";
  const PlanResult one = run_plan(model, plan, 0, 1);
  const PlanResult four = run_plan(model, plan, 0, 4);
  EXPECT_EQ(one.memory.activations, four.memory.activations);
  EXPECT_EQ(one.memory.peak, four.memory.peak);
  const auto ops = compute_ops(one);
  EXPECT_GE(position(ops, "layers.0.add.x.recompute"), 0);
  EXPECT_GE(position(ops, "layers.1.feed_forward.mul.g.recompute"), 0);
  EXPECT_LT(one.memory.activations, run_plan(model, kLocal, 0, 1).memory.activations);
}

// torchtitan's op-level selective checkpointing: in each pass over a block the 1st, 3rd, 5th and
// 7th matmul (wq, wv, w1, w2) and flash attention keep their outputs; the rest is recomputed.
TEST(OpGraph, SelectiveCheckpointingKeepsAttentionAndEverySecondMatmul) {
  const std::string model = "zoo:gpt:layers=2,hidden=64,heads=4,kv_heads=2,ffn=128,vocab=100,seq=16";
  auto plan = [](const std::string& policy) {
    return R"({"world_size": 1, "batch_size": 2, "steps": [{"checkpoint": {"module": "layers.0")" + policy +
           R"(}}, {"checkpoint": {"module": "layers.1")" + policy + "}}]}";
  };
  const PlanResult full = run_plan(model, plan(""), 0, 1);
  const PlanResult selective = run_plan(model, plan(R"(, "policy": "selective_op")"), 0, 1);
  const PlanResult none = run_plan(model, kLocal, 0, 1);
  const auto ops = compute_ops(selective);
  for (const char* kept : {"wq", "wv", "sdpa"})
    EXPECT_EQ(position(ops, std::string("layers.0.attention.") + kept + ".recompute"), -1) << kept;
  for (const char* kept : {"w1", "w2"})
    EXPECT_EQ(position(ops, std::string("layers.1.feed_forward.") + kept + ".recompute"), -1) << kept;
  for (const char* recomputed :
       {"layers.0.attention.wk.recompute", "layers.0.attention.wo.recompute", "layers.0.feed_forward.w3.recompute",
        "layers.0.attention.rope.recompute", "layers.1.ffn_norm.recompute", "layers.1.feed_forward.mul.g.recompute",
        // repeat_kv is an op of its own: recomputed although attention's output is kept
        "layers.0.attention.sdpa.repeat_kv.recompute"})
    EXPECT_GE(position(ops, recomputed), 0) << recomputed;
  EXPECT_GE(position(compute_ops(full), "layers.0.attention.wq.recompute"), 0);
  EXPECT_LT(full.memory.activations, selective.memory.activations);
  EXPECT_LT(selective.memory.activations, none.memory.activations);
  EXPECT_LT(selective.iterations.back().compute_flops, full.iterations.back().compute_flops);
  EXPECT_GT(selective.iterations.back().compute_flops, none.iterations.back().compute_flops);
  // What the first pass keeps is handed back: four iterations peak where one does.
  const PlanResult four = run_plan(model, plan(R"(, "policy": "selective_op")"), 0, 4);
  EXPECT_EQ(four.memory.peak, selective.memory.peak);
  EXPECT_EQ(four.memory.activations, selective.memory.activations);
  try {
    plan_from_json(plan(R"(, "policy": "some")"));
    ADD_FAILURE() << "an unknown policy was accepted";
  } catch (const core::InputError& e) {
    EXPECT_STREQ(e.what(),
                 "plan.json: steps[0].checkpoint.policy: unknown policy \"some\" (expected full or selective_op)");
  }
}

// torchtitan's RMSNorm runs as a chain of eager kernels in float32: 36 bytes per bfloat16 element
// forward (casts 12, pow 8, mean 4, product 8, weight 4) where one fused kernel moves 4, and it
// keeps the float32 copy and the normalised input (6 bytes per element) where the fused kernel
// keeps x (2) and the next Linear shares it.
TEST(OpGraph, EagerRmsNormCostsItsKernelChain) {
  auto model = [](bool fused) {
    return json{
        {"name", "N"},
        {"dtype", "bfloat16"},
        {"modules", {{{"name", "norm"}, {"type", "RMSNorm"}, {"dim", 8}, {"fused", fused}}, linear("fc", 8, 8)}}};
  };
  const PlanResult fused = run_plan(model_from_json(model(true)), kLocal, 0, 1);
  const PlanResult eager = run_plan(model_from_json(model(false)), kLocal, 0, 1);
  const std::int64_t n = 2 * 8;
  EXPECT_EQ(compute_ops(fused)[0]->bytes_accessed, n * 4);
  const auto op = [](const PlanResult& r, const std::string& name) {
    const auto ops = compute_ops(r);
    const int at = position(ops, name);
    EXPECT_GE(at, 0) << name;
    return at < 0 ? nullptr : ops[at];
  };
  // The cast up (x.float() forward, type_as's gradient backward) is its own class; in all, 36
  // bytes per element forward and 2.5 times that backward.
  EXPECT_EQ(op(eager, "norm.forward")->bytes_accessed + op(eager, "norm.cast.forward")->bytes_accessed, n * 36);
  EXPECT_EQ(op(eager, "norm.cast.forward")->bytes_accessed, n * 6);
  EXPECT_EQ(op(eager, "norm.cast.forward")->op_class, "cast");
  EXPECT_EQ(op(eager, "norm.backward")->bytes_accessed + op(eager, "norm.cast.backward")->bytes_accessed, n * 90);
  // Fused backward: the input gradient's kernel and the weight's each read x and dy.
  EXPECT_EQ(op(fused, "norm.backward")->bytes_accessed, n * 2 * 5);
  // fused: x (n*2) + rstd (2*4) + the norm's output, saved by fc (n*2); eager: the float32 copy
  // (n*4) + the normalised input (n*2) + rstd + fc's input (n*2).
  EXPECT_EQ(fused.memory.activations, n * 2 + 8 + n * 2);
  EXPECT_EQ(eager.memory.activations, n * 4 + n * 2 + 8 + n * 2);
  json layer_norm = model(false);
  layer_norm["modules"][0]["type"] = "LayerNorm";
  EXPECT_EQ(input_error(layer_norm),
            "model.json: modules[0].fused: LayerNorm always runs one kernel (native_layer_norm); only RMSNorm has an "
            "eager composite");
  EXPECT_THROW(core::load_model("zoo:gpt:layers=1,norm=triton"), core::InputError);
  EXPECT_FALSE(
      core::load_model("zoo:gpt:layers=1").modules[core::load_model("zoo:gpt:layers=1").find_module("norm")].fused);
  const Model fused_zoo = core::load_model("zoo:gpt:layers=1,norm=fused");
  EXPECT_TRUE(fused_zoo.modules[fused_zoo.find_module("layers.0.ffn_norm")].fused);
}

// The zoo's transformers run flash attention unless asked for the math path (pre-flash training
// code: the scores materialised, softmax and dropout as kernels of their own), which costs the
// attention's memory traffic over the scores and keeps the probabilities.
TEST(OpGraph, ZooAttentionMathPathAndDropout) {
  const std::string base = "zoo:gpt:style=gpt,layers=1,hidden=64,heads=4,ffn=256,vocab=128,seq=32";
  const Model flash = core::load_model(base);
  const Model math = core::load_model(base + ",attention=math,dropout=0.1");
  const core::Module& flash_sdpa = flash.modules[flash.find_module("h.0.attn.sdpa")];
  const core::Module& math_sdpa = math.modules[math.find_module("h.0.attn.sdpa")];
  EXPECT_TRUE(flash_sdpa.fused);
  EXPECT_EQ(flash_sdpa.dropout, 0);
  EXPECT_FALSE(math_sdpa.fused);
  EXPECT_DOUBLE_EQ(math_sdpa.dropout, 0.1);
  const std::string plan = R"({"world_size": 1, "batch_size": 2, "steps": []})";
  const PlanResult fast = run_plan(flash, plan, 0, 1);
  const PlanResult slow = run_plan(math, plan, 0, 1);
  // The math path keeps the float32 probabilities [2, 4, 32, 32], the dropped ones and the
  // one-byte mask; flash keeps its log-sum-exp and its own output [2, 32, 64] (nanoGPT's c_proj
  // saves the contiguous copy of it, another tensor).
  const std::int64_t scores = 2 * 4 * 32 * 32, lse = 2 * 4 * 32 * 4, output = 2 * 32 * 64 * 4;
  EXPECT_EQ(slow.memory.activations - fast.memory.activations, scores * (4 + 4 + 1) - lse - output);
  for (const char* bad : {"attention=xformers", "dropout=1", "dropout=-0.1", "dropout=0.1x"})
    EXPECT_THROW(core::load_model(base + "," + bad), core::InputError) << bad;
}

// Under FSDP mixed precision a leaf computes in param_dtype: its activations are bfloat16 and so is
// what it saves, though the parameters (and the model input) are float32.
TEST(OpGraph, MixedPrecisionActivationsTakeTheComputeDtype) {
  const json doc = {{"name", "Two"}, {"modules", {linear("fc1", 8, 8), linear("fc2", 8, 8)}}};
  const std::string plain = R"({"world_size": 2, "batch_size": 2, "steps": [{"fully_shard": {"module": ""}}]})";
  const std::string mixed = R"({"world_size": 2, "batch_size": 2, "steps": [{"fully_shard": {"module": "",
      "mixed_precision": {"param_dtype": "bfloat16"}}}]})";
  EXPECT_EQ(run_plan(model_from_json(doc), plain, 0, 1).memory.activations, 2 * (2 * 8 * 4));
  const PlanResult result = run_plan(model_from_json(doc), mixed, 0, 1);
  EXPECT_EQ(result.memory.activations, 2 * (2 * 8 * 2));
  EXPECT_EQ(compute_ops(result)[0]->bytes_accessed, (2 * 8 + 64 + 2 * 8) * 2);
}

// AdamW with master weights on bfloat16 parameters: a float32 copy and float32 states (12 bytes per
// element instead of 4), and a step that reads the bfloat16 gradient, updates the copy and the two
// states, and writes the parameter back: 2 + 8 + 16 + 2 bytes per element.
TEST(OpGraph, MasterWeightsKeepAFloat32CopyAndStates) {
  const json doc = {{"name", "Half"}, {"dtype", "bfloat16"}, {"modules", {linear("fc", 8, 8)}}};
  const std::string plan = R"({"world_size": 1, "batch_size": 2, "optimizer": {"type": "adamw"}, "steps": []})";
  std::string master = plan;
  master.replace(master.find(R"("adamw")"), 7, R"("adamw", "master_weights": true)");
  const PlanResult plain = run_plan(model_from_json(doc), plan, 0, 1);
  const PlanResult kept = run_plan(model_from_json(doc), master, 0, 1);
  EXPECT_EQ(plain.memory.optimizer_state, 64 * 2 * 2);
  EXPECT_EQ(kept.memory.optimizer_state, 64 * 4 * 3);
  auto step_bytes = [](const PlanResult& r) {
    for (const core::ProgramOp& op : r.program.ops)
      if (op.name == "optimizer.step") return op.bytes_accessed;
    return std::int64_t{-1};
  };
  EXPECT_EQ(step_bytes(plain), 64 * 2 * 7);
  EXPECT_EQ(step_bytes(kept), 64 * 28);
  // float32 parameters have no separate copy.
  const json full = {{"name", "Full"}, {"modules", {linear("fc", 8, 8)}}};
  EXPECT_EQ(run_plan(model_from_json(full), master, 0, 1).memory.optimizer_state, 64 * 4 * 2);
}

// README "Model format" worked example: the YAML block after its heading, planned as the text says.
TEST(OpGraph, ReadmeWorkedExampleHoldsTrue) {
  std::ifstream file(std::string(STRATSIM_SOURCE_DIR) + "/README.md");
  std::stringstream text;
  text << file.rdbuf();
  const std::string readme = text.str();
  const std::size_t heading = readme.find("**Worked example: a pre-norm residual block with SwiGLU**");
  ASSERT_NE(heading, std::string::npos);
  const std::size_t begin = readme.find("```yaml\n", heading) + 8;
  const std::size_t end = readme.find("```", begin);
  const json doc = core::parse_document(readme.substr(begin, end - begin), "README.md block.yaml", true);
  const PlanResult result = run_plan(model_from_json(doc), kLocal, 0, 1);
  std::vector<std::string> names;
  for (const core::ProgramOp* op : compute_ops(result)) names.push_back(op->name);
  EXPECT_EQ(names, (std::vector<std::string>{"norm.forward", "w1.forward", "silu.forward", "w3.forward",
                                             "Block.mul.g.forward", "w2.forward", "Block.add.x.forward", "w2.backward",
                                             "Block.mul.g.backward", "w3.backward", "silu.backward", "w1.backward",
                                             "Block.h.grad_accumulate", "norm.backward", "optimizer.step"}));
  EXPECT_EQ(result.memory.activations, 29'368'320);
  EXPECT_NE(readme.find("28.01 MiB (29,368,320 B)", heading), std::string::npos);
}

}  // namespace
}  // namespace stratsim::test
