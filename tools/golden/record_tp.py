#!/usr/bin/env python3
"""Record what real PyTorch's modern tensor parallelism issues, as golden vectors for stratsim.

Each generated case is a small torchtitan-style Llama (token embeddings, blocks of attention with
q/k/v/o projections, rotary embeddings and grouped-query SDPA, a SwiGLU feed-forward, RMSNorms, the
output projection and a cross entropy loss) parallelised the way torchtitan's
parallelize_llama does it, with variations: sequence parallelism (SequenceParallel norms,
PrepareModuleInput before attention and feed-forward, Shard(1) residual stream) or not,
loss_parallel or not, PrepareModuleInput handing on a local tensor (use_local_output=True),
PrepareModuleOutput gathering the sequence after the last block, FSDP2 on a dp x tp mesh with
mixed precision and gradient accumulation.

It records every collective in issue order (the CommDebugMode key, the mesh dim of its group, the
bytes of its input and output, its dtype) under PyTorch's fake process group, and writes the same
case as a stratsim model document and plan; tests/core/golden_vectors_test.cpp checks the planner
against every recorded collective. Run it in a throw-away virtual environment with PyTorch
(README "Golden vectors"):

    python tools/golden/record_tp.py --cases 60 --seed 3 -o tests/data/golden/tp_sp.json
"""

import argparse
import os
import random
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, PrepareModuleOutput,
                                               RowwiseParallel, SequenceParallel, loss_parallel,
                                               parallelize_module)

import clipping  # noqa: E402 (tools/golden/clipping.py, beside this file)
import scaling  # noqa: E402 (tools/golden/scaling.py)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from record_fsdp2 import DTYPES, CollectiveRecorder, compact_json, torch_version_rule  # noqa: E402


# ------------------------------------------------------------------------------------------------
# The model, as nn.Module and as the stratsim document describing it (core/src/zoo.cpp's llama).

class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.head_dim = c["dim"] // c["heads"]
        self.wq = nn.Linear(c["dim"], c["heads"] * self.head_dim, bias=False)
        self.wk = nn.Linear(c["dim"], c["kv_heads"] * self.head_dim, bias=False)
        self.wv = nn.Linear(c["dim"], c["kv_heads"] * self.head_dim, bias=False)
        self.wo = nn.Linear(c["heads"] * self.head_dim, c["dim"], bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        # -1 heads: the local ones under tensor parallelism, as torchtitan views them.
        q = self.wq(x).view(b, s, -1, self.head_dim)
        k = self.wk(x).view(b, s, -1, self.head_dim)
        v = self.wv(x).view(b, s, -1, self.head_dim)
        q, k = rotary(q), rotary(k)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                                           enable_gqa=True)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


def rotary(x):
    """Rotary embedding's arithmetic (element-wise on local heads; no collective)."""
    half = x.shape[-1] // 2
    angle = torch.arange(x.shape[1], dtype=torch.float32, device=x.device).view(1, -1, 1, 1) / 10.0
    x1, x2 = x[..., :half], x[..., half:]
    cos, sin = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class FeedForward(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.w1 = nn.Linear(c["dim"], c["ffn"], bias=False)
        self.w2 = nn.Linear(c["ffn"], c["dim"], bias=False)
        self.w3 = nn.Linear(c["dim"], c["ffn"], bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attention = Attention(c)
        self.feed_forward = FeedForward(c)
        self.attention_norm = nn.RMSNorm(c["dim"])
        self.ffn_norm = nn.RMSNorm(c["dim"])

    def forward(self, x):
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.tok_embeddings = nn.Embedding(c["vocab"], c["dim"])
        self.layers = nn.ModuleList(TransformerBlock(c) for _ in range(c["layers"]))
        self.norm = nn.RMSNorm(c["dim"])
        self.output = nn.Linear(c["dim"], c["vocab"], bias=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h))


def call(child, inputs, out):
    return {"call": child, "in": inputs, "out": out}


def linear(name, n_in, n_out):
    return {"name": name, "type": "Linear", "in_features": n_in, "out_features": n_out, "bias": False}


def model_document(c):
    """The stratsim model: the same module tree and forward, with the loss as its last step."""
    head_dim = c["dim"] // c["heads"]
    layers = []
    for i in range(c["layers"]):
        attention = {"name": "attention", "type": "Attention", "children": [
            linear("wq", c["dim"], c["heads"] * head_dim), linear("wk", c["dim"], c["kv_heads"] * head_dim),
            linear("wv", c["dim"], c["kv_heads"] * head_dim),
            {"name": "rope", "type": "RotaryEmbedding", "functional": True},
            {"name": "sdpa", "type": "ScaledDotProductAttention", "heads": c["heads"], "kv_heads": c["kv_heads"],
             "head_dim": head_dim, "functional": True},
            linear("wo", c["heads"] * head_dim, c["dim"])],
            "forward": [call("wq", "x", "q"), call("wk", "x", "k"), call("wv", "x", "v"), call("rope", "q", "q"),
                        call("rope", "k", "k"), call("sdpa", ["q", "k", "v"], "o"), call("wo", "o", "o")]}
        ffn = {"name": "feed_forward", "type": "FeedForward", "children": [
            linear("w1", c["dim"], c["ffn"]), linear("w2", c["ffn"], c["dim"]), linear("w3", c["dim"], c["ffn"]),
            {"name": "silu", "type": "SiLU", "functional": True}],
            "forward": [call("w1", "x", "g"), call("silu", "g", "g"), call("w3", "x", "u"),
                        {"op": "mul", "in": ["g", "u"], "out": "g"}, call("w2", "g", "y")]}
        norm = lambda name: {"name": name, "type": "RMSNorm", "dim": c["dim"]}
        layers.append({"name": str(i), "type": "TransformerBlock",
                       "children": [attention, ffn, norm("attention_norm"), norm("ffn_norm")],
                       "forward": [call("attention_norm", "x", "h"), call("attention", "h", "a"),
                                   {"op": "add", "in": ["x", "a"], "out": "x"}, call("ffn_norm", "x", "h"),
                                   call("feed_forward", "h", "f"), {"op": "add", "in": ["x", "f"], "out": "x"}]})
    return {"name": "Transformer", "seq_len": c["seq"], "modules": [
        {"name": "tok_embeddings", "type": "Embedding", "num_embeddings": c["vocab"], "embedding_dim": c["dim"]},
        {"name": "layers", "type": "ModuleList", "children": layers},
        {"name": "norm", "type": "RMSNorm", "dim": c["dim"]},
        linear("output", c["dim"], c["vocab"]),
        {"name": "loss", "type": "CrossEntropyLoss", "functional": True}]}


def random_config(rng, tp):
    heads = tp * rng.choice([1, 2])
    kv_heads = rng.choice([h for h in (heads, heads // 2) if h % tp == 0 and h > 0])
    head_dim = rng.choice([2, 4])
    return {"layers": rng.randint(1, 2), "dim": heads * head_dim, "heads": heads, "kv_heads": kv_heads,
            "ffn": tp * rng.choice([2, 3, 5]), "vocab": tp * rng.choice([3, 4, 6]), "seq": tp * rng.choice([1, 2, 3])}


# ------------------------------------------------------------------------------------------------
# Plans: torchtitan's parallelize_llama with variations. Each style is JSON (the stratsim plan)
# and is turned into the PyTorch ParallelStyle by `style_object`.

def layout(text):
    return None if text is None else Replicate() if text.startswith("Replicate") else Shard(int(text[6:-1]))


def style_object(spec):
    if isinstance(spec, str):
        spec = {"style": spec}
    kind = spec["style"]
    local = {"use_local_output": spec["use_local_output"]} if "use_local_output" in spec else {}
    if kind in ("ColwiseParallel", "RowwiseParallel"):
        cls = ColwiseParallel if kind == "ColwiseParallel" else RowwiseParallel
        return cls(input_layouts=layout(spec.get("input_layouts")), output_layouts=layout(spec.get("output_layouts")),
                   **local)
    if kind == "SequenceParallel":
        return SequenceParallel(**local)
    if kind == "PrepareModuleInput":
        return PrepareModuleInput(input_layouts=(layout(spec["input_layouts"][0]),),
                                  desired_input_layouts=(layout(spec["desired_input_layouts"][0]),), **local)
    if kind == "PrepareModuleOutput":
        return PrepareModuleOutput(output_layouts=layout(spec["output_layouts"]),
                                   desired_output_layouts=layout(spec["desired_output_layouts"]), **local)
    raise ValueError(kind)


def random_plan(rng, c, tp, dp):
    sp = rng.random() < 0.7
    lp = rng.random() < 0.5
    gather_last = sp and rng.random() < 0.25  # PrepareModuleOutput gathers the sequence after the last block
    local_attention_input = sp and rng.random() < 0.25
    last = str(c["layers"] - 1)
    top = {"tok_embeddings": {"style": "RowwiseParallel", "input_layouts": "Replicate()",
                              "output_layouts": "Shard(1)" if sp else "Replicate()"}}
    if sp and not gather_last:
        top["norm"] = "SequenceParallel"
    output = {"style": "ColwiseParallel", "output_layouts": "Shard(-1)" if lp else "Replicate()"}
    if sp and not gather_last:
        output["input_layouts"] = "Shard(1)"
    if lp:
        output["use_local_output"] = False
    top["output"] = output
    steps = [{"parallelize_module": {"module": "", "mesh_dim": "tp", "plan": top}}]
    for i in range(c["layers"]):
        block = {}
        if sp:
            block["attention_norm"] = "SequenceParallel"
            block["attention"] = {"style": "PrepareModuleInput", "input_layouts": ["Shard(1)"],
                                  "desired_input_layouts": ["Replicate()"]}
            if local_attention_input:
                block["attention"]["use_local_output"] = True
        block.update({"attention.wq": "ColwiseParallel", "attention.wk": "ColwiseParallel",
                      "attention.wv": "ColwiseParallel",
                      "attention.wo": {"style": "RowwiseParallel", "output_layouts": "Shard(1)"} if sp
                      else "RowwiseParallel"})
        if sp:
            block["ffn_norm"] = "SequenceParallel"
            block["feed_forward"] = {"style": "PrepareModuleInput", "input_layouts": ["Shard(1)"],
                                     "desired_input_layouts": ["Replicate()"]}
        block.update({"feed_forward.w1": "ColwiseParallel",
                      "feed_forward.w2": {"style": "RowwiseParallel", "output_layouts": "Shard(1)"} if sp
                      else "RowwiseParallel",
                      "feed_forward.w3": "ColwiseParallel"})
        steps.append({"parallelize_module": {"module": f"layers.{i}", "mesh_dim": "tp", "plan": block}})
    if gather_last:
        steps.append({"parallelize_module": {"module": "layers", "mesh_dim": "tp", "plan": {
            last: {"style": "PrepareModuleOutput", "output_layouts": "Shard(1)",
                   "desired_output_layouts": "Replicate()"}}}})
    accumulation = 1
    mesh = {"shape": [dp, tp], "dim_names": ["dp", "tp"]}
    if dp > 1:
        precision = rng.random() < 0.4
        accumulation = rng.choice([1, 1, 2])
        hsdp = rng.random() < 0.5  # HSDP x TP on a 3-D mesh [dp_replicate 2, dp, tp]
        dims = ["dp"]
        if hsdp:
            mesh = {"shape": [2, dp, tp], "dim_names": ["dp_replicate", "dp", "tp"]}
            dims = ["dp_replicate", "dp"]
        for i, module in enumerate([f"layers.{i}" for i in range(c["layers"])] + [""]):
            args = {"module": module, "mesh_dim": dims}
            if precision:
                args["mp_policy"] = {"param_dtype": "bfloat16", "reduce_dtype": "float32"}
            # torchtitan keeps the last block unsharded after forward (FSDP would prefetch it at once).
            if module and i == c["layers"] - 1 and rng.random() < 0.5:
                args["reshard_after_forward"] = False
            steps.append({"torch.distributed.fsdp.fully_shard": args})
    world = 1
    for extent in mesh["shape"]:
        world *= extent
    plan = {"world_size": world, "mesh": mesh,
            "batch_size": rng.choice([1, 2]), "iterations": 2 * accumulation,
            "gradient_accumulation_steps": accumulation, "torch_version": torch_version_rule(), "steps": steps}
    if lp:
        plan["loss_parallel"] = True
    return plan


# ------------------------------------------------------------------------------------------------
# Recording.

def record_case(c, plan):
    mesh_spec = plan["mesh"]
    mesh = init_device_mesh("cpu", tuple(mesh_spec["shape"]), mesh_dim_names=tuple(mesh_spec["dim_names"]))
    group_names = {mesh.get_group(name).group_name: name for name in mesh_spec["dim_names"]}
    torch.manual_seed(0)
    model = Transformer(c)
    modules = dict(model.named_modules())
    recorder = CollectiveRecorder(group_names)
    roots = []
    with recorder:
        for step in plan["steps"]:
            if "parallelize_module" in step:
                args = step["parallelize_module"]
                styles = {fqn: style_object(spec) for fqn, spec in args["plan"].items()}
                parallelize_module(modules[args["module"]], mesh[args["mesh_dim"]], styles)
                continue
            args = step["torch.distributed.fsdp.fully_shard"]
            policy = MixedPrecisionPolicy()
            if "mp_policy" in args:
                mp = args["mp_policy"]
                policy = MixedPrecisionPolicy(param_dtype=DTYPES[mp["param_dtype"]],
                                              reduce_dtype=DTYPES.get(mp.get("reduce_dtype")))
            dims = args["mesh_dim"]
            sub_mesh = mesh[tuple(dims)] if len(dims) > 1 else mesh[dims[0]]
            fully_shard(modules[args["module"]], mesh=sub_mesh, mp_policy=policy,
                        reshard_after_forward=args.get("reshard_after_forward"))
            roots.append(modules[args["module"]])
    init = list(recorder.records)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = scaling.scaler_for(plan)
    accumulation = plan["gradient_accumulation_steps"]
    iterations = []
    generator = torch.Generator().manual_seed(1)
    with recorder:
        for micro in range(1, plan["iterations"] + 1):
            sync = micro % accumulation == 0
            for module in roots:
                module.set_requires_gradient_sync(sync, recurse=False)
            start = len(recorder.records)
            shape = (plan["batch_size"], c["seq"])
            tokens = torch.randint(0, c["vocab"], shape, generator=generator)
            labels = torch.randint(0, c["vocab"], shape, generator=generator)
            # torchtitan's cross_entropy_loss: the logits in float32, tokens flattened.
            logits = model(tokens)
            if plan.get("loss_parallel"):
                with loss_parallel():
                    scaling.backward(F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1)), scaler)
            else:
                scaling.backward(F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1)), scaler)
            if sync:
                scaling.unscale(scaler, optimizer)
                clipping.clip(model, plan)
                scaling.step(scaler, optimizer)
                optimizer.zero_grad()
            iterations.append(recorder.records[start:])
    return init, iterations


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=60)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--grad-scaler", action="store_true",
                        help="every case scales its loss with torch.amp.GradScaler (scaling.py)")
    parser.add_argument("-o", "--output", required=True)
    options = parser.parse_args()
    rng = random.Random(options.seed)
    cases = []
    while len(cases) < options.cases:
        tp = rng.choice([2, 2, 4])
        dp = rng.choice([1, 1, 2])
        c = random_config(rng, tp)
        plan = random_plan(rng, c, tp, dp)
        name = f"tp_sp{'_scaled' if options.grad_scaler else ''}_{len(cases):02d}"
        index = len(cases)
        ((init, iterations), clip_error), scaler_error = scaling.record(
            lambda: clipping.record(record_case, plan, options.seed, index, c, plan), plan, options.grad_scaler)
        case = {"name": name, "model": model_document(c), "plan": plan}
        if clip_error:
            case["clip_error"] = clip_error
        if scaler_error:
            case["grad_scaler_error"] = scaler_error
        if init:
            case["init"] = init
        case["iterations"] = iterations
        cases.append(case)
        print(f"{name}: mesh {plan['mesh']['shape']}, {c['layers']} layers, {sum(len(i) for i in iterations)} collectives",
              file=sys.stderr)
    out = {"recorded_with": f"PyTorch {torch.__version__}, fake process group, CPU tensors",
           "generator": "tools/golden/record_tp.py" + (" --grad-scaler" if options.grad_scaler else ""),
           "family": "tp_sp", "seed": options.seed, "cases": cases}
    with open(options.output, "w") as f:
        f.write(compact_json(out))


if __name__ == "__main__":
    main()
