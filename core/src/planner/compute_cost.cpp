#include "compute_cost.hpp"

#include <algorithm>

namespace stratsim::core::planner {

std::vector<GemmShape> linear_forward_gemms(std::int64_t tokens, std::int64_t in_local, std::int64_t out_local) {
  return {{tokens, out_local, in_local}};
}

std::vector<GemmShape> linear_backward_gemms(std::int64_t tokens, std::int64_t in_local, std::int64_t out_local,
                                             bool input_grad) {
  std::vector<GemmShape> gemms;
  if (input_grad) gemms.push_back({tokens, in_local, out_local});
  gemms.push_back({out_local, in_local, tokens});
  return gemms;
}

namespace {

// x.float() on n elements of d bytes: PyTorch's unvectorised conversion kernel (class cast) reads
// d and writes 4 bytes each; a float32 x is returned as it is.
std::int64_t upcast_bytes(std::int64_t n, int d) { return d == 4 ? 0 : n * (d + 4); }

// torchtitan's repeat_kv: x[:, :, :, None, :].expand(...).reshape(...) on k and v, a copy of a
// stride-0 view that PyTorch runs without vectorised loads (class strided_copy). It is its own op:
// selective checkpointing recomputes it even when attention's output is kept. Backward sums the
// query heads' gradients back onto each KV head (a reduction). The heads-wide k and v are what the
// attention kernel saves.
void repeat_kv_cost(LeafCost& cost, std::int64_t t, std::int64_t kv_width, std::int64_t width, int d) {
  const std::int64_t both = 2 * (t * kv_width + t * width) * d;  // k and v: read narrow, write wide
  cost.forward_prologue.push_back({"repeat_kv", "strided_copy", 0, both});
  cost.backward_extra.push_back({"repeat_kv", "norm", 2.0 * static_cast<double>(t * width), both});
  cost.saved_bytes += 2 * t * width * d;
}

// Scaled-dot-product attention over the local heads. Flash (SDPA's fused kernel, the default)
// never writes the [batch, heads, seq, seq] scores: it reads q, k, v, writes the output and the
// log-sum-exp, and its backward recomputes the probabilities (5 GEMM-sized products to forward's 2).
// The math path (fused: false) runs two batched GEMMs around a softmax that materialises the
// scores, keeps the probabilities for backward, and computes the masked half anyway.
void attention_cost(LeafCost& cost, const Module& m, const Activation& q, std::int64_t kv_local) {
  const std::int64_t width = q.features();
  const bool chain = kv_local <= 0;
  const std::int64_t batch = q.rank() == 3 ? q.shape[0] : 1;
  const std::int64_t seq = q.rank() == 3 ? q.shape[1] : q.tokens();
  const std::int64_t t = q.tokens();
  const int d = dtype_size(q.dtype);
  // repeat_kv: k and v are copied out to the query heads first, so the kernel reads (and saves)
  // heads-wide k and v. An exported model says so by its SDPA seeing as many KV heads as query
  // heads while the k tensor the graph hands it is narrower: the pass-through expand and reshape
  // between them are repeat_kv. (Without kv_heads, a narrower k is SDPA reading the KV heads.)
  const bool repeat = !chain && kv_local < width && (m.repeat_kv || (m.kv_heads_given && m.kv_heads == m.heads));
  const std::int64_t kv = chain || repeat ? width : kv_local;
  const std::int64_t head_dim = std::max<std::int64_t>(1, m.head_dim);
  const std::int64_t heads = std::max<std::int64_t>(1, width / head_dim);
  const std::int64_t lse = batch * heads * seq * 4;
  const std::int64_t qkvo = (2 * t * width + 2 * t * kv) * d;
  // repeat_kv's backward sum runs after the kernel's backward (and the softmax's).
  if (m.fused) {
    if (repeat) repeat_kv_cost(cost, t, kv_local, width, d);
    const double fraction = m.causal ? 0.5 : 1.0;
    cost.op_class = "attention";
    cost.forward_flops = 4.0 * batch * seq * seq * width * fraction;
    cost.backward_flops = 2.5 * cost.forward_flops;
    cost.forward_bytes = qkvo + lse;
    cost.backward_bytes = qkvo + t * width * d + lse + (t * width + 2 * t * kv) * d;
    // A chain model has no q, k, v tensors to share: the kernel's saved inputs are its own.
    cost.saved_bytes += lse + (chain ? qkvo : 0);
    cost.saves_kv = !chain && !repeat;
    cost.saves_input = cost.saves_output = !chain;
    return;
  }
  const std::int64_t rows = batch * heads * seq;  // batched GEMMs flattened into M
  const std::int64_t scores = rows * seq;         // elements of [batch, heads, seq, seq]
  const bool dropout = m.dropout > 0;
  cost.op_class = "gemm";
  cost.forward_gemms = {{rows, seq, head_dim}, {rows, head_dim, seq}};  // q k^T, p v
  cost.backward_gemms = {{rows, seq, head_dim},
                         {rows, head_dim, seq},  // dp = do v^T, dv = p^T do
                         {rows, head_dim, seq},
                         {rows, head_dim, seq}};  // dq = ds k, dk = ds^T q
  for (const GemmShape& g : cost.forward_gemms) cost.forward_flops += g.flops();
  for (const GemmShape& g : cost.backward_gemms) cost.backward_flops += g.flops();
  cost.forward_bytes = qkvo + 2 * scores * d;  // the GEMMs read q, k, v, write o, write and read p
  // dp = do v^T writes a score-sized tensor, dv = p^T do reads p, and ds is read twice (dq, dk).
  cost.backward_bytes = qkvo + t * width * d + (t * width + 2 * t * kv) * d + 4 * scores * d;
  // The causal mask's add (SDPA's math path adds a -inf bias; without a mask there is none),
  // softmax and dropout each read and write the scores.
  const std::int64_t passes = (m.causal ? 2 : 1) + (dropout ? 1 : 0);
  // Their own class (attention_scores): on A100 they stream well below a copy's rate.
  cost.forward_extra.push_back({"softmax", "attention_scores", 6.0 * static_cast<double>(scores),
                                passes * 2 * scores * d + (dropout ? scores : 0)});
  cost.backward_extra.push_back({"softmax", "attention_scores", 4.0 * static_cast<double>(scores),
                                 (dropout ? 3 * scores * d + scores : 0) + 3 * scores * d});
  // softmax keeps the probabilities; with dropout, p v reads the dropped ones (another tensor) and
  // dropout keeps its mask.
  cost.saved_bytes += scores * d * (dropout ? 2 : 1) + (dropout ? scores : 0);
  cost.saves_kv = !chain && !repeat;
  cost.saves_input = !chain;
  if (chain) cost.saved_bytes += 3 * t * width * d;
  if (repeat) repeat_kv_cost(cost, t, kv_local, width, d);
}

// F.cross_entropy(logits.float(), labels) as torchtitan calls it: the cast to float32, log_softmax,
// NLL; backward writes the one-hot gradient, runs log_softmax's backward and casts back. Saves the
// float32 log-probabilities. How often log_softmax touches a row depends on whether the row fits
// a block's 48 KiB of shared memory (PyTorch's SoftMax.cu): up to 12,256 float32 it is read once
// (forward: a read and a write; backward: the gradient and the output read, the result written).
// A vocabulary row (128,256 float32 = 501 KiB) does not fit, so the kernels read it from memory on
// every pass (cunn_SoftMaxForward, not cunn_SoftMaxForwardSmem): forward reads it for the max, for
// the sum of exponentials and to write the result; backward reads the gradient for its sum, then
// the gradient and the output to write. Four passes of t x V x 4 bytes each way: on one H100 and
// one H200 the two kernels ran at 0.94-1.01 of each GPU's copy rate counted so
// (benchmarks/accuracy/gpu/measured/, "profile").
// Its temporaries are the largest of a language model's step (t x vocab): forward holds the logits
// and their float32 copy while log_softmax writes; backward holds NLL's float32 gradient while
// log_softmax's backward writes another (measured on one H100, benchmarks/accuracy/gpu/: the peak
// of a 2, 4 and 8-layer Llama 3.1 8B sat 15.1 GiB above the saved tensors, 2 x 16384 x 128256 x 4 B
// = 15.7 GiB).
void cross_entropy_cost(LeafCost& cost, const Activation& logits) {
  const std::int64_t n = logits.tokens() * logits.features();
  const int d = dtype_size(logits.dtype);
  const std::int64_t cast = upcast_bytes(n, d);
  cost.op_class = "elementwise";
  // logits.float() runs in PyTorch's unvectorised conversion kernel (class cast: 1.79 TB/s on one
  // H100, where copies stream at 3.0); the gradient's cast back down is vectorised.
  if (cast > 0) cost.forward_extra.push_back({"cast", "cast", 0, cast});
  cost.forward_flops = 4.0 * static_cast<double>(n);
  cost.backward_flops = 3.0 * static_cast<double>(n);
  constexpr std::int64_t shared_memory_row = (48 * 1024 - 128) / 4;  // float32 a block holds, less its scratch
  const bool row_fits = logits.features() < shared_memory_row;
  const std::int64_t forward_passes = row_fits ? 2 : 4, backward_passes = row_fits ? 3 : 4;
  cost.forward_bytes = forward_passes * n * 4;
  cost.backward_bytes = n * 4 + backward_passes * n * 4 + cast;
  cost.saved_parts = {n * 4, logits.tokens() * 8};  // log-probabilities, labels
  cost.saved_bytes = cost.saved_parts[0] + cost.saved_parts[1];
  // Forward: the logits' float32 copy (the logits are the output layer's, held until the loss has
  // read them), while log_softmax writes the log-probabilities it saves. Backward: NLL's float32
  // gradient and log_softmax's, which is cast back to the logits' dtype for the output layer's
  // backward.
  if (d != 4) cost.forward_workspace.push_back(n * 4);
  cost.backward_workspace = {n * 4, n * 4};
}

// torchtitan's (and Meta's llama) RMSNorm in eager mode: _norm(x.float()).type_as(x) * weight with
// _norm(x) = x * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps). Each op is its own kernel over
// [t, f]: the casts (skipped in float32), pow, mean, the product, the weight multiply; backward is
// autograd through the same chain, about 2.5 times the traffic. pow and the product save the
// float32 x (x itself when it is float32), the weight multiply its normalised input: tensors no
// other op sees, so they are the leaf's own. The cast up (x.float() forward, type_as's gradient
// backward) is PyTorch's unvectorised conversion kernel, priced apart (class cast).
void eager_rms_norm_cost(LeafCost& cost, const Activation& in) {
  const std::int64_t n = in.tokens() * in.features();
  const int d = dtype_size(in.dtype);
  const std::int64_t cast_up = upcast_bytes(n, d);
  cost.op_class = "norm";
  cost.forward_flops = 4.0 * static_cast<double>(n);
  cost.backward_flops = 10.0 * static_cast<double>(n);
  const std::int64_t forward = n * (20 + 2 * d) + 2 * cast_up;
  cost.forward_bytes = forward - cast_up;
  cost.backward_bytes = forward * 5 / 2 - cast_up;
  if (cast_up > 0) {
    cost.forward_extra.push_back({"cast", "cast", 0, cast_up});
    cost.backward_extra.push_back({"cast", "cast", 0, cast_up});
  }
  cost.saved_bytes = in.tokens() * 4 + n * d + (d == 4 ? 0 : n * 4);
  cost.saves_input = d == 4;
}

}  // namespace

// Coefficients for element-wise and norm kernels follow their eager PyTorch implementations (see
// README "Compute model").
LeafCost leaf_cost(const Module& m, const Activation& in, std::int64_t in_local, std::int64_t out_local,
                   std::int64_t kv_local) {
  LeafCost cost;
  const double tokens = static_cast<double>(in.tokens());
  const int d = dtype_size(in.dtype);
  const std::int64_t t = in.tokens();
  switch (m.leaf) {
    case LeafKind::linear: {
      const double mac = tokens * in_local * out_local;
      cost.op_class = "gemm";
      cost.forward_flops = 2 * mac + (m.bias ? tokens * out_local : 0);
      // grad_weight always; grad_input only when the input requires grad.
      cost.backward_flops = 2 * mac * (in.requires_grad ? 2 : 1) + (m.bias ? tokens * out_local : 0);
      const std::int64_t weight = in_local * out_local * d;
      cost.forward_bytes = t * in_local * d + weight + t * out_local * d;
      cost.backward_bytes = 2 * cost.forward_bytes + weight;
      cost.saves_input = true;
      cost.forward_gemms = linear_forward_gemms(t, in_local, out_local);
      cost.backward_gemms = linear_backward_gemms(t, in_local, out_local, in.requires_grad);
      break;
    }
    case LeafKind::relu:
    case LeafKind::sigmoid:
    case LeafKind::silu:
    case LeafKind::gelu:
    case LeafKind::tanh:
    case LeafKind::dropout:
    case LeafKind::identity: {
      const double per = m.leaf == LeafKind::relu       ? 1
                         : m.leaf == LeafKind::identity ? 0
                         : m.leaf == LeafKind::dropout  ? 2
                                                        : 4;
      const std::int64_t f = in.features();
      cost.op_class = "elementwise";
      cost.forward_flops = per * tokens * f;
      cost.backward_flops = (per + 1) * tokens * f;
      cost.forward_bytes = 2 * t * f * d;
      cost.backward_bytes = 3 * t * f * d;
      // Autograd's choice: ReLU, Sigmoid and Tanh keep their result, SiLU and GELU their input,
      // Dropout its mask.
      if (m.leaf == LeafKind::dropout) cost.saved_bytes = t * f;
      else if (m.leaf == LeafKind::relu || m.leaf == LeafKind::sigmoid || m.leaf == LeafKind::tanh)
        cost.saves_output = true;
      else if (m.leaf != LeafKind::identity) cost.saves_input = true;
      break;
    }
    case LeafKind::rotary: {
      // torchtitan's apply_rotary_emb: x.float() viewed as complex, times freqs_cis, back to x's
      // dtype (type_as); backward runs the same three kernels on the gradient (cast up, times the
      // conjugate, cast down). Saves nothing (freqs is a buffer). The complex product reads and
      // writes float32 pairs and the cast down streams (elementwise); the cast up is PyTorch's
      // unvectorised conversion kernel (class cast). A float32 x needs neither cast.
      const std::int64_t n = t * in.features();
      const std::int64_t cast = upcast_bytes(n, d);
      cost.op_class = "elementwise";
      cost.forward_flops = cost.backward_flops = 3.0 * static_cast<double>(n);
      cost.forward_bytes = cost.backward_bytes = 8 * n + cast;
      if (cast > 0) {
        cost.forward_extra.push_back({"cast", "cast", 0, cast});
        cost.backward_extra.push_back({"cast", "cast", 0, cast});
      }
      break;
    }
    case LeafKind::cross_entropy:
      cross_entropy_cost(cost, in);
      break;
    case LeafKind::rms_norm:
      if (!m.fused) {
        eager_rms_norm_cost(cost, in);
        break;
      }
      [[fallthrough]];
    case LeafKind::layer_norm: {
      const std::int64_t f = in.features();
      const double per = m.leaf == LeafKind::rms_norm ? 4 : 5;
      cost.op_class = "norm";
      cost.forward_flops = per * tokens * f;
      cost.backward_flops = 2 * per * tokens * f;
      cost.forward_bytes = 2 * t * f * d;
      // Two backward kernels: the input gradient (reads x and dy, writes dx) and the weight's
      // (reads x and dy again): 1.9 and 2.5 TB/s on one H100 (benchmarks/accuracy/gpu/measured/).
      cost.backward_bytes = (m.params.empty() ? 3 : 5) * t * f * d;
      cost.saves_input = true;
      cost.saved_bytes = t * 4 * (m.leaf == LeafKind::layer_norm ? 2 : 1);  // mean / rstd
      break;
    }
    case LeafKind::embedding: {
      // in_local is the local rows of the table. Dense backward (embedding_dense_backward) zeroes
      // the whole weight gradient, sorts the token ids, sums each id's gradient rows into float32
      // partials and scatters them into the rows: 1.4 ms on one H100 for 16,384 tokens of a
      // 128,256 x 4,096 table, where the forward gather takes 0.1. A sparse gradient is the rows.
      cost.op_class = "embedding";
      cost.forward_flops = 0;
      cost.backward_flops = tokens * out_local;  // scatter-add of the gradient rows
      cost.forward_bytes = t * 8 + 2 * t * out_local * d;
      cost.backward_bytes = t * 8 + 2 * t * out_local * (m.sparse ? d : d + 4);
      if (!m.sparse) cost.backward_extra.push_back({"zero_grad", "elementwise", 0, in_local * out_local * d});
      cost.saved_bytes = t * 8;
      break;
    }
    case LeafKind::attention:
      attention_cost(cost, m, in, kv_local);
      break;
    case LeafKind::container:
      break;
  }
  return cost;
}

JoinCost join_cost(JoinKind kind, std::size_t inputs, std::int64_t elements, int dtype_bytes) {
  JoinCost cost;
  const auto k = static_cast<std::int64_t>(inputs);
  const double n = static_cast<double>(elements);
  switch (kind) {
    case JoinKind::add:  // backward hands the gradient to every input unchanged: no kernel
      cost.forward_flops = n * static_cast<double>(k - 1);
      cost.forward_bytes = (k + 1) * elements * dtype_bytes;
      break;
    case JoinKind::mul:  // d(a*b) = (g*b, g*a): each input's gradient reads the others
      cost.forward_flops = n * static_cast<double>(k - 1);
      cost.forward_bytes = (k + 1) * elements * dtype_bytes;
      cost.backward_flops = n * static_cast<double>(k * (k - 1));
      cost.backward_bytes = (2 * k + 1) * elements * dtype_bytes;
      cost.saves_inputs = true;
      break;
    case JoinKind::concat:  // backward slices the gradient: views, no kernel
      cost.forward_bytes = 2 * elements * dtype_bytes;
      break;
  }
  return cost;
}

KernelCost grad_accumulate_cost(int uses, std::int64_t elements, int dtype_bytes) {
  const std::int64_t adds = std::max(0, uses - 1);
  return {"grad_accumulate", "elementwise", static_cast<double>(adds * elements), 3 * adds * elements * dtype_bytes};
}

OptimizerCost optimizer_cost(const OptimizerConfig& opt) {
  OptimizerCost cost;
  cost.flops_per_element = 2;  // p -= lr * g
  if (opt.kind == OptimizerKind::sgd) {
    if (opt.momentum != 0) {
      cost.flops_per_element += 2;
      cost.states = 1;
    }
  } else {
    cost.flops_per_element = 12;
    cost.states = opt.amsgrad ? 3 : 2;
  }
  if (opt.weight_decay != 0) cost.flops_per_element += 2;
  cost.master_weights = opt.master_weights;
  return cost;
}

}  // namespace stratsim::core::planner
