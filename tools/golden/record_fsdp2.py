#!/usr/bin/env python3
"""Record what real PyTorch's FSDP2 issues, as golden vectors for stratsim's planner.

For each generated case (a small model, a device mesh, fully_shard calls with their options,
gradient accumulation) this builds the model in PyTorch, applies FSDP2's fully_shard exactly as
the stratsim plan says, trains a few micro-steps under PyTorch's fake process group (no peers;
any world size; CPU tensors) and records every collective in issue order: the CommDebugMode key,
the mesh dims of its group, the bytes of its input and output, and its dtype.

The same case is written as a stratsim model document and plan, so that
tests/core/golden_vectors_test.cpp can check the planner against every recorded collective.

PyTorch is never stratsim's dependency: install it in a throw-away virtual environment
(../shared/reference/modern-torch.md; README "Golden vectors") and run

    python tools/golden/record_fsdp2.py --cases 48 --seed 1 -o tests/data/golden/fsdp2.json
"""

import argparse
import collections
import json
import random
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.utils._python_dispatch import TorchDispatchMode

import clipping  # noqa: E402 (tools/golden/clipping.py, beside this file)
import scaling  # noqa: E402 (tools/golden/scaling.py)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
COLLECTIVE_NAMESPACES = ("c10d", "_c10d_functional", "_dtensor")


# ------------------------------------------------------------------------------------------------
# Models: a stratsim model document and the nn.Module it describes.

def random_model(rng):
    """A root Sequential of Linears, ReLUs, RMSNorms and nested blocks, with odd widths so that
    dim-0 padding is exercised."""
    width = rng.choice([5, 8, 12, 13, 16, 24])
    modules = []
    used = 0

    def linear(name, width):
        out = rng.choice([3, 4, 7, 8, 16, 17, 32, 33])
        return {"name": name, "type": "Linear", "in_features": width, "out_features": out,
                "bias": rng.random() < 0.7}, out

    input_width = width
    for i in range(rng.randint(2, 4)):
        kind = rng.random()
        name = f"l{i}"
        if kind < 0.45:
            children = []
            for j in range(rng.randint(1, 3)):
                child, width = linear(f"fc{j}", width)
                children.append(child)
                if rng.random() < 0.5:
                    children.append({"name": f"act{j}", "type": "ReLU"})
            if rng.random() < 0.4:
                children.append({"name": "norm", "type": "RMSNorm", "dim": width})
            modules.append({"name": f"block{i}", "type": "Sequential", "children": children})
        elif kind < 0.85:
            module, width = linear(name, width)
            modules.append(module)
        else:
            modules.append({"name": name, "type": "ReLU"})
        used += 1
    module, width = linear("head", width)
    modules.append(module)
    return {"name": "Sequential", "modules": modules}, input_width


def build_module(spec):
    kind = spec["type"]
    if kind == "Linear":
        return nn.Linear(spec["in_features"], spec["out_features"], bias=spec.get("bias", True))
    if kind == "ReLU":
        return nn.ReLU()
    if kind == "RMSNorm":
        return nn.RMSNorm(spec["dim"])
    if kind == "Sequential":
        return nn.Sequential(collections.OrderedDict((c["name"], build_module(c)) for c in spec["children"]))
    raise ValueError(kind)


def build_model(doc):
    return nn.Sequential(collections.OrderedDict((m["name"], build_module(m)) for m in doc["modules"]))


def submodule_names(doc):
    """FQNs of every module below the root, in pre-order."""
    names = []

    def walk(spec, prefix):
        fqn = prefix + spec["name"]
        names.append((fqn, spec["type"]))
        for child in spec.get("children", []):
            walk(child, fqn + ".")

    for m in doc["modules"]:
        walk(m, "")
    return names


# ------------------------------------------------------------------------------------------------
# Plans.

def random_plan(rng, doc):
    world = rng.choice([1, 2, 3, 4, 4, 6, 8])
    hsdp = world >= 4 and world % 2 == 0 and rng.random() < 0.3
    if hsdp:
        replicate = 2
        mesh = {"shape": [replicate, world // replicate], "dim_names": ["dp_replicate", "dp_shard"]}
        mesh_dim = ["dp_replicate", "dp_shard"]
    else:
        mesh = {"shape": [world], "dim_names": ["dp"]}
        mesh_dim = ["dp"]
    # fully_shard on some submodules (deepest first, as torchtitan does), then usually the root.
    candidates = [name for name, kind in submodule_names(doc) if kind in ("Sequential", "Linear")]
    chosen = [name for name in candidates if rng.random() < 0.4]
    chosen.sort(key=lambda name: -name.count("."))
    calls = chosen + ([""] if rng.random() < 0.85 or not chosen else [])
    # Mixed precision only with the root sharded: a module outside every group would get a
    # bfloat16 input against float32 parameters.
    precision = rng.choice([None, None, ("bfloat16", None), ("bfloat16", "float32")]) if "" in calls else None
    accumulation = rng.choice([1, 1, 2, 3])
    keep_unsharded = accumulation > 1 and rng.random() < 0.5
    steps = []
    for module in calls:
        args = {"module": module, "mesh_dim": mesh_dim}
        reshard = rng.random()
        if reshard < 0.25:
            args["reshard_after_forward"] = False
        elif reshard < 0.5:
            args["reshard_after_forward"] = True
        elif reshard >= 0.88 and (runs := post_forward_sizes(mesh["shape"][-1])):
            # An int: reshard to runs of k ranks (no draw of its own, so the other cases stay as
            # they were recorded before ints were).
            args["reshard_after_forward"] = runs[int(reshard * 1000) % len(runs)]
        if precision:
            args["mp_policy"] = {"param_dtype": precision[0]}
            if precision[1]:
                args["mp_policy"]["reduce_dtype"] = precision[1]
        if keep_unsharded:
            args["reshard_after_backward_in_accumulation"] = False
        steps.append({"torch.distributed.fsdp.fully_shard": args})
    return {
        "world_size": world,
        "mesh": mesh,
        "batch_size": rng.choice([1, 2, 3]),
        "input_requires_grad": rng.random() < 0.25,
        "iterations": 2 * accumulation,
        "gradient_accumulation_steps": accumulation,
        "torch_version": torch_version_rule(),
        "steps": steps,
    }


def post_forward_sizes(shard_ranks):
    """The ints reshard_after_forward takes other than 1 and the whole shard group."""
    return [k for k in range(2, shard_ranks) if shard_ranks % k == 0]


def random_tp_model(rng, tp):
    """Blocks of Linear(d, h) -> ReLU -> Linear(h, d), the Megatron MLP pair, with optional norms
    between them and a head; h a multiple of the tensor-parallel degree."""
    d = rng.choice([4, 6, 8, 12])
    modules = []
    for i in range(rng.randint(1, 3)):
        h = tp * rng.choice([2, 3, 4, 5])
        modules.append({"name": f"block{i}", "type": "Sequential", "children": [
            {"name": "fc_in", "type": "Linear", "in_features": d, "out_features": h, "bias": rng.random() < 0.7},
            {"name": "act", "type": "ReLU"},
            {"name": "fc_out", "type": "Linear", "in_features": h, "out_features": d, "bias": rng.random() < 0.7}]})
        if rng.random() < 0.4:
            modules.append({"name": f"norm{i}", "type": "RMSNorm", "dim": d})
    modules.append({"name": "head", "type": "Linear", "in_features": d, "out_features": rng.choice([3, 5, 8]),
                    "bias": False})
    return {"name": "Sequential", "modules": modules}, d


def random_tp_plan(rng, doc, shape):
    """parallelize_module on the tp dim (colwise fc_in, rowwise fc_out in some blocks), then FSDP2
    on the dp dim: blocks, then the root."""
    world = shape[0] * shape[1]
    entries = {}
    blocks = [m["name"] for m in doc["modules"] if m["type"] == "Sequential"]
    for block in blocks:
        if rng.random() < 0.8:
            entries[f"{block}.fc_in"] = "colwise"
            entries[f"{block}.fc_out"] = "rowwise"
    if not entries:
        entries[f"{blocks[0]}.fc_in"] = "colwise"
        entries[f"{blocks[0]}.fc_out"] = "rowwise"
    steps = [{"parallelize_module": {"module": "", "mesh_dim": "tp", "plan": entries}}]
    fsdp = rng.random() < 0.85
    precision = rng.choice([None, None, ("bfloat16", "float32")]) if fsdp else None
    if fsdp:
        for module in [b for b in blocks if rng.random() < 0.6] + [""]:
            args = {"module": module, "mesh_dim": ["dp"]}
            if rng.random() < 0.25:
                args["reshard_after_forward"] = rng.random() < 0.5
            if precision:
                args["mp_policy"] = {"param_dtype": precision[0], "reduce_dtype": precision[1]}
            steps.append({"torch.distributed.fsdp.fully_shard": args})
    accumulation = rng.choice([1, 1, 2])
    return {
        "world_size": world,
        "mesh": {"shape": list(shape), "dim_names": ["dp", "tp"]},
        "batch_size": rng.choice([1, 2, 3]),
        "input_requires_grad": rng.random() < 0.3,
        "iterations": 2 * accumulation,
        "gradient_accumulation_steps": accumulation,
        "torch_version": torch_version_rule(),
        "steps": steps,
    }


def torch_version_rule():
    major, minor = torch.__version__.split(".")[:2]
    return f"{major}.{minor}"


# ------------------------------------------------------------------------------------------------
# Recording.

class CollectiveRecorder(TorchDispatchMode):
    """Logs every collective op in issue order, keyed as CommDebugMode keys them: the c10d ops by
    name, the native functional collectives under their legacy c10d_functional names, and
    _dtensor.shard_dim_alltoall. Like CommDebugMode it lets DTensor desugar first."""

    def __init__(self, group_names):
        super().__init__()
        self.group_names = group_names
        self.records = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.HigherOrderOperator):
            return func(*args, **kwargs)
        if any(t.__name__ == "DTensor" for t in types):
            return NotImplemented
        out = func(*args, **kwargs)
        key = str(func._overloadpacket)
        if key.startswith("_c10d_functional."):
            key = key[1:]
        if key in COMM_DEBUG_MODE_OPS:
            self.records.append(describe(key, args, out, self.group_names))
        return out


def tensors_of(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_of(v)]
    return []


# What CommDebugMode counts (torch/distributed/tensor/debug/_comm_mode.py): the c10d collectives,
# the functional ones under their legacy names, and DTensor's shard_dim_alltoall.
COMM_DEBUG_MODE_OPS = {f"c10d.{op}" for op in (
    "_allgather_base_", "_reduce_scatter_base_", "allgather_", "allgather_coalesced_",
    "allgather_into_tensor_coalesced_", "allreduce_", "allreduce_coalesced_", "alltoall_", "alltoall_base_",
    "broadcast_", "gather_", "scatter_", "reduce_", "reduce_scatter_", "reduce_scatter_tensor_coalesced_")} | {
    f"c10d_functional.{op}" for op in (
        "all_gather_into_tensor", "all_gather_into_tensor_coalesced", "all_reduce", "all_reduce_coalesced",
        "all_to_all_single", "broadcast", "reduce_scatter_tensor", "reduce_scatter_tensor_coalesced")} | {
    "_dtensor.shard_dim_alltoall"}


def group_of(args, group_names):
    for a in args:
        if isinstance(a, torch.ScriptObject) and "ProcessGroup" in str(a):
            pg = dist.ProcessGroup.unbox(a)
            return group_names.get(pg.group_name, f"?{pg.group_name}")
        if isinstance(a, str) and a in group_names:  # functional collectives name their group
            return group_names[a]
    return "?"


def describe(key, args, out, group_names):
    nbytes = lambda ts: sum(t.numel() * t.element_size() for t in ts)
    if key in ("c10d._allgather_base_", "c10d._reduce_scatter_base_", "c10d.scatter_", "c10d.allgather_"):
        output, inp = tensors_of(args[0]), tensors_of(args[1])  # (outputs, inputs)
    elif key.startswith("c10d."):  # in place on their first argument: allreduce_, broadcast_, ...
        output = inp = tensors_of(args[0])
    else:  # functional: a new tensor
        inp, output = tensors_of(args[0]), tensors_of(out)
    return {"op": key, "group": group_of(args, group_names), "input_bytes": nbytes(inp),
            "output_bytes": nbytes(output), "dtype": DTYPE_NAMES.get(inp[0].dtype, str(inp[0].dtype))}


def apply_tensor_parallel(model, mesh, args):
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    plan = {fqn: styles[style]() for fqn, style in args["plan"].items()}
    parallelize_module(model, mesh[args["mesh_dim"]], plan)


def record_case(doc, input_width, plan):
    mesh_spec = plan["mesh"]
    mesh = init_device_mesh("cpu", tuple(mesh_spec["shape"]), mesh_dim_names=tuple(mesh_spec["dim_names"]))
    group_names = {mesh.get_group(name).group_name: name for name in mesh_spec["dim_names"]}
    torch.manual_seed(0)
    model = build_model(doc)
    modules = dict(model.named_modules())
    # What applying the plan issues (parallelize_module distributes parameters from rank 0 since
    # 2.5) is recorded too, as the collectives before the first micro-step's.
    recorder = CollectiveRecorder(group_names)
    with recorder:
        for step in plan["steps"]:
            if "parallelize_module" in step:
                apply_tensor_parallel(model, mesh, step["parallelize_module"])
                continue
            args = step["torch.distributed.fsdp.fully_shard"]
            dims = args["mesh_dim"]
            sub_mesh = mesh[tuple(dims)] if len(dims) > 1 else mesh[dims[0]]
            policy = MixedPrecisionPolicy()
            if "mp_policy" in args:
                mp = args["mp_policy"]
                policy = MixedPrecisionPolicy(param_dtype=DTYPES[mp["param_dtype"]],
                                              reduce_dtype=DTYPES.get(mp.get("reduce_dtype")))
            reshard = args.get("reshard_after_forward")
            fully_shard(modules[args["module"]], mesh=sub_mesh, reshard_after_forward=reshard, mp_policy=policy)
            param_group = fully_shard.state(modules[args["module"]])._fsdp_param_group
            if type(reshard) is int and param_group is not None:  # the post-forward mesh: runs of ranks
                info = param_group.post_forward_mesh_info
                group_names[info.shard_process_group.group_name] = f"{dims[-1]}({reshard})"
    init = list(recorder.records)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = scaling.scaler_for(plan)
    accumulation = plan["gradient_accumulation_steps"]
    fsdp_steps = [s["torch.distributed.fsdp.fully_shard"] for s in plan["steps"] if "parallelize_module" not in s]
    keep_unsharded = any(not s.get("reshard_after_backward_in_accumulation", True) for s in fsdp_steps)
    roots = [modules[s["module"]] for s in fsdp_steps]
    iterations = []
    with recorder:
        for micro in range(1, plan["iterations"] + 1):
            sync = micro % accumulation == 0
            # set_requires_gradient_sync / set_reshard_after_backward recurse into the submodules'
            # groups; calling them on every fully_shard module is what a plan without a single
            # root needs.
            for module in roots:
                module.set_requires_gradient_sync(sync, recurse=False)
                if keep_unsharded:
                    module.set_reshard_after_backward(sync, recurse=False)
            start = len(recorder.records)
            x = torch.randn(plan["batch_size"], input_width, requires_grad=plan["input_requires_grad"])
            scaling.backward(model(x).sum(), scaler)
            if sync:
                scaling.unscale(scaler, optimizer)
                clipping.clip(model, plan)
                scaling.step(scaler, optimizer)
                optimizer.zero_grad()
            iterations.append(recorder.records[start:])
    return init, iterations


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=48)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--family", choices=["fsdp2", "fsdp2_tp"], default="fsdp2",
                        help="fsdp2: FSDP2 and HSDP on 1-D/2-D meshes; fsdp2_tp: Colwise/Rowwise "
                             "tensor parallelism on a dp x tp mesh, mostly under FSDP2")
    parser.add_argument("--grad-scaler", action="store_true",
                        help="every case scales its loss with torch.amp.GradScaler (scaling.py)")
    parser.add_argument("-o", "--output", required=True)
    options = parser.parse_args()
    rng = random.Random(options.seed)
    cases = []
    while len(cases) < options.cases:
        if options.family == "fsdp2":
            doc, input_width = random_model(rng)
            plan = random_plan(rng, doc)
        else:
            shape = rng.choice([(1, 2), (2, 2), (2, 2), (3, 2), (2, 4), (4, 2)])
            doc, input_width = random_tp_model(rng, shape[1])
            plan = random_tp_plan(rng, doc, shape)
        name = f"{options.family}{'_scaled' if options.grad_scaler else ''}_{len(cases):02d}"
        # Each case runs on a fake process group of its own world size (clipping.record).
        index = len(cases)
        ((init, iterations), clip_error), scaler_error = scaling.record(
            lambda: clipping.record(record_case, plan, options.seed, index, doc, input_width, plan), plan,
            options.grad_scaler)
        case = {"name": name, "model": doc, "input_features": input_width, "plan": plan}
        if clip_error:
            case["clip_error"] = clip_error
        if scaler_error:
            case["grad_scaler_error"] = scaler_error
        if init:  # applying the plan issued collectives: "init", before iteration 1's
            case["init"] = init
        case["iterations"] = iterations
        cases.append(case)
        print(f"{name}: world {plan['world_size']}, {len(plan['steps'])} fully_shard calls, "
              f"{sum(len(i) for i in cases[-1]['iterations'])} collectives", file=sys.stderr)
    out = {"recorded_with": f"PyTorch {torch.__version__}, fake process group, CPU tensors",
           "generator": "tools/golden/record_fsdp2.py" + (" --grad-scaler" if options.grad_scaler else ""),
           "family": options.family, "seed": options.seed, "cases": cases}
    with open(options.output, "w") as f:
        f.write(compact_json(out))


def compact_json(doc):
    """The recording with one collective per line, so that a re-recording diffs line by line."""
    head = {k: v for k, v in doc.items() if k != "cases"}
    lines = ["{" + json.dumps(head)[1:-1] + ', "cases": [']
    for i, case in enumerate(doc["cases"]):
        meta = {k: v for k, v in case.items() if k not in ("init", "iterations")}
        lines.append(" {" + json.dumps(meta)[1:-1] + ",")
        if "init" in case:
            lines.append('  "init": [\n   ' + ",\n   ".join(json.dumps(r) for r in case["init"]) + "\n  ],")
        lines.append('  "iterations": [')
        for j, iteration in enumerate(case["iterations"]):
            records = [json.dumps(r) for r in iteration]
            body = ("\n   " + ",\n   ".join(records) + "\n  ") if records else ""
            lines.append("  [" + body + "]" + ("," if j + 1 < len(case["iterations"]) else ""))
        lines.append(" ]}" + ("," if i + 1 < len(doc["cases"]) else ""))
    lines.append("]}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
