// The module tree: what a user's nn.Module looks like to the planner. Parameters carry PyTorch
// FQNs in named_parameters() order; leaves know enough about themselves to cost their compute.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stratsim/core/dtype.hpp"

namespace stratsim::core {

// Leaf module types the planner can cost. Containers (Sequential and user modules) are `container`.
enum class LeafKind {
  container,
  linear,
  relu,
  sigmoid,
  silu,
  gelu,
  tanh,
  dropout,
  identity,
  rms_norm,
  layer_norm,
  embedding,
  attention,      // scaled-dot-product attention core (no parameters): softmax(QK^T)V
  rotary,         // rotary position embedding applied to q or k (no parameters)
  cross_entropy,  // the loss over the vocabulary: log_softmax of the logits, then NLL (no parameters)
};

std::string_view leaf_kind_name(LeafKind kind);
std::optional<LeafKind> parse_leaf_kind(std::string_view type);  // a leaf module type, aliases included
std::string leaf_type_list();                                    // "Linear, ReLU, ..." for error messages
// The parameter-free activations that act element by element (ReLU, Sigmoid, SiLU, GELU, Tanh,
// Identity): their output has the input's shape and placement.
bool is_elementwise(LeafKind kind);

struct Parameter {
  std::string fqn;   // "u1.seq.1.weight"; a root parameter is just "p"
  std::string name;  // "weight"
  int module = 0;    // owning module index
  std::vector<std::int64_t> shape;
  DType dtype = DType::float32;
  bool requires_grad = true;

  std::int64_t numel() const;
  std::int64_t bytes() const { return numel() * dtype_size(dtype); }
};

// How a join step combines its input tensors: x + y (a residual), x * y (a gate, as SwiGLU's
// silu(w1 x) * w3 x), or torch.cat along the last dimension.
enum class JoinKind { add, mul, concat };
std::string_view join_kind_name(JoinKind kind);
std::optional<JoinKind> parse_join_kind(std::string_view name);

// One step of a container's forward: run a child module, multiply a tensor by one of the
// container's own 2-D parameters (torch.mm(x, self.p), as CompositeParamModel does), or join
// tensors. Steps read and write the container's named tensors ("slots"): slot 0 is the
// container's input; a chain step reads the previous step's output and writes the same slot, so a
// plain list of names is the chain it always was.
struct ForwardStep {
  enum class Kind { child, param_matmul, join };
  Kind kind = Kind::child;
  int index = 0;  // module index for `child`, parameter index for `param_matmul`
  JoinKind join = JoinKind::add;
  std::vector<int> inputs = {0};  // slots read, in order (attention: q, k, v)
  int output = 0;                 // slot written
  int output_uses = 1;            // later steps that read this version of the slot (>1: a branch)
};

struct Module {
  std::string name;  // attribute name in the parent ("fc1", "0"); empty for the root
  std::string fqn;   // dotted path from the root; empty for the root
  std::string type;  // PyTorch class name: "Linear", "Sequential", "UnitModule", ...
  LeafKind leaf = LeafKind::container;
  int parent = -1;
  int depth = 0;
  std::vector<int> children;  // registration order
  std::vector<int> params;    // own parameters, registration order
  std::vector<ForwardStep> forward;
  std::vector<std::string> tensors = {"x"};  // slot names; slot 0 is the input
  int result = 0;                            // the slot the forward returns (the last step's output)
  int input_uses = 1;                        // steps that read the input (>1: it branches)
  bool graph = false;                        // the forward names tensors (not a plain chain)

  // Leaf attributes (zero when not applicable).
  std::int64_t in_features = 0;   // Linear
  std::int64_t out_features = 0;  // Linear
  bool bias = false;              // Linear
  std::int64_t dim = 0;           // norms; optional feature width for element-wise leaves
  std::int64_t num_embeddings = 0, embedding_dim = 0;
  bool sparse = false;                                 // Embedding(sparse=True)
  std::int64_t heads = 0, kv_heads = 0, head_dim = 0;  // attention
  bool causal = false;                                 // attention
  // attention: one flash kernel (SDPA's default); false materialises the scores. RMSNorm: one
  // kernel; false runs the eager composite (x.float(), pow, mean, rsqrt, mul, cast, * weight).
  bool fused = true;
  double dropout = 0;  // attention: dropout on the probabilities (unfused only keeps a mask)
  // attention: the model copies k and v out to the query heads before SDPA (torchtitan's and
  // Meta's llama `repeat_kv`), so the kernel reads and saves heads-wide k and v; false: SDPA reads
  // the KV heads itself (`enable_gqa=True`).
  bool repeat_kv = false;
  bool kv_heads_given = false;   // attention: the file named kv_heads (an exported model's SDPA view)
  std::int64_t subtree_end = 0;  // one past the last module index of this subtree (pre-order)
  bool checkpoint = false;       // the model's own forward wraps this module in checkpoint(...)
  bool functional =
      false;  // a torch.* call in forward (torch.sigmoid), not a registered submodule; reported, has no parameters
};

struct Model {
  std::string name;
  std::vector<Module> modules;      // pre-order (named_modules() order); modules[0] is the root
  std::vector<Parameter> params;    // named_parameters() order: pre-order, own parameters first
  std::int64_t input_features = 0;  // width of the model input (last dim)
  std::int64_t seq_len = 0;         // > 0 for sequence models: input is [batch, seq] (tokens) or [batch, seq, features]
  bool token_input = false;         // the input is token ids (first leaf is an Embedding)

  const Module& root() const { return modules.front(); }
  int find_module(std::string_view fqn) const;  // -1 when absent
  int find_param(std::string_view fqn) const;   // -1 when absent
  bool in_subtree(int module, int ancestor) const {
    return module >= ancestor && module < modules[ancestor].subtree_end;
  }
  std::int64_t subtree_numel(int module) const;
  std::int64_t total_numel() const;
};

// The forward with containers flattened, in execution order: `child` steps name leaf modules,
// `param_matmul` steps a container's own parameter; join steps, which read no parameters, are left
// out. What every walk over the modules and parameters a forward reads needs.
std::vector<ForwardStep> flat_forward(const Model& model);

// Joins a prefix and a name the way named_modules() does ("" + "fc1" = "fc1").
std::string join_fqn(std::string_view prefix, std::string_view name);

}  // namespace stratsim::core
