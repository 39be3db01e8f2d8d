#!/usr/bin/env python3
"""Record what real PyTorch's FSDP1 (the FullyShardedDataParallel wrapper) issues, as golden vectors.

For each generated case (a small model, FullyShardedDataParallel with a sharding strategy, an
auto-wrap policy, use_orig_params, forward and backward prefetch, mixed precision, gradient
accumulation under no_sync) this records every collective in issue order under PyTorch's fake process
group, as record_fsdp2.py does, and writes the case as a stratsim model and plan.

FSDP1 needs an accelerator unless given device_id=cpu; on CPU it all-gathers the flat parameter
with the list form (c10d.allgather_), where a GPU run issues c10d._allgather_base_ with the same
bytes: the recording keys it as the GPU run does.

    python tools/golden/record_fsdp1.py --cases 40 --seed 4 -o tests/data/golden/fsdp1.json

FSDP1 over tensor parallelism is not recorded: under the fake process group FSDP1's gradient
writeback fails on DTensor gradients ("Cannot writeback when the gradient shape changes").
"""

import argparse
import os
import random
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import BackwardPrefetch, MixedPrecision, ShardingStrategy
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import ModuleWrapPolicy
from torch.testing._internal.distributed.fake_pg import FakeStore

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from record_fsdp2 import (DTYPES, CollectiveRecorder, apply_tensor_parallel, build_model,  # noqa: E402
                          compact_json, random_model, torch_version_rule)
import scaling  # noqa: E402 (tools/golden/scaling.py)

STRATEGIES = {"FULL_SHARD": ShardingStrategy.FULL_SHARD, "SHARD_GRAD_OP": ShardingStrategy.SHARD_GRAD_OP,
              "NO_SHARD": ShardingStrategy.NO_SHARD, "HYBRID_SHARD": ShardingStrategy.HYBRID_SHARD}
PREFETCH = {"BACKWARD_PRE": BackwardPrefetch.BACKWARD_PRE, "BACKWARD_POST": BackwardPrefetch.BACKWARD_POST,
            None: None}


def random_fsdp_args(rng, hsdp):
    args = {"module": ""}
    if hsdp:
        args["strategy"] = "HYBRID_SHARD"
    else:
        args["strategy"] = rng.choice(["FULL_SHARD", "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"])
    wrap = rng.choice([None, ["Sequential"], ["Linear"]])
    if wrap:
        args["policy"] = {"module_types": wrap}
    args["use_orig_params"] = rng.random() < 0.5
    args["forward_prefetch"] = rng.random() < 0.4
    args["backward_prefetch"] = rng.choice(["BACKWARD_PRE", "BACKWARD_PRE", "BACKWARD_POST", None])
    if rng.random() < 0.25:
        args["mixed_precision"] = {"param_dtype": "bfloat16", "reduce_dtype": rng.choice(["bfloat16", "float32"])}
    return args


def random_plan(rng):
    doc, width = random_model(rng)
    world = rng.choice([2, 3, 4, 4, 8])
    hsdp = world in (4, 8) and rng.random() < 0.25
    if hsdp:
        mesh = {"shape": [2, world // 2], "dim_names": ["dp_replicate", "dp_shard"]}
    else:
        mesh = {"shape": [world], "dim_names": ["dp"]}
    args = random_fsdp_args(rng, hsdp)
    args["mesh_dim"] = mesh["dim_names"]
    steps = [{"FullyShardedDataParallel": args}]
    accumulation = rng.choice([1, 1, 2])
    return doc, width, {
        "world_size": world, "mesh": mesh, "batch_size": rng.choice([1, 2, 4]),
        "input_requires_grad": rng.random() < 0.25, "iterations": 2 * accumulation,
        "gradient_accumulation_steps": accumulation, "torch_version": torch_version_rule(), "steps": steps}


def record_case(doc, width, plan):
    mesh_spec = plan["mesh"]
    mesh = init_device_mesh("cpu", tuple(mesh_spec["shape"]), mesh_dim_names=tuple(mesh_spec["dim_names"]))
    group_names = {mesh.get_group(name).group_name: name for name in mesh_spec["dim_names"]}
    # ShardedGradScaler reduces found_inf over the default group: all the mesh's dims, which the
    # planner names "world" (on a 1-D mesh the dim's group is the default one and keeps its name).
    group_names.setdefault(dist.group.WORLD.group_name, "world")
    torch.manual_seed(0)
    model = build_model(doc)
    recorder = CollectiveRecorder(group_names)
    wrapped = model
    with recorder:
        for step in plan["steps"]:
            if "parallelize_module" in step:
                apply_tensor_parallel(model, mesh, step["parallelize_module"])
                continue
            args = step["FullyShardedDataParallel"]
            dims = args["mesh_dim"]
            sub_mesh = mesh[tuple(dims)] if len(dims) > 1 else mesh[dims[0]]
            mp = None
            if "mixed_precision" in args:
                mp = MixedPrecision(param_dtype=DTYPES[args["mixed_precision"]["param_dtype"]],
                                    reduce_dtype=DTYPES[args["mixed_precision"]["reduce_dtype"]])
            policy = None
            if "policy" in args:
                classes = {"Sequential": torch.nn.Sequential, "Linear": torch.nn.Linear}
                policy = ModuleWrapPolicy({classes[t] for t in args["policy"]["module_types"]})
            wrapped = FSDP(model, device_mesh=sub_mesh, sharding_strategy=STRATEGIES[args["strategy"]],
                           auto_wrap_policy=policy, use_orig_params=args["use_orig_params"],
                           forward_prefetch=args["forward_prefetch"],
                           backward_prefetch=PREFETCH[args["backward_prefetch"]], mixed_precision=mp,
                           device_id=torch.device("cpu"))
    init = [gpu_key(r) for r in recorder.records]
    optimizer = torch.optim.SGD(wrapped.parameters(), lr=0.01)
    scaler = scaling.scaler_for(plan, sharded=True)
    accumulation = plan["gradient_accumulation_steps"]
    iterations = []
    with recorder:
        for micro in range(1, plan["iterations"] + 1):
            sync = micro % accumulation == 0
            start = len(recorder.records)
            x = torch.randn(plan["batch_size"], width, requires_grad=plan["input_requires_grad"])
            if sync:
                scaling.backward(wrapped(x).sum(), scaler)
                scaling.unscale(scaler, optimizer)
                scaling.step(scaler, optimizer)
                optimizer.zero_grad()
            else:
                with wrapped.no_sync():
                    scaling.backward(wrapped(x).sum(), scaler)
            iterations.append([gpu_key(r) for r in recorder.records[start:]])
    return init, iterations


def gpu_key(record):
    """The flat parameter's all-gather as a GPU run keys it (see the module docstring)."""
    if record["op"] == "c10d.allgather_":
        record = dict(record, op="c10d._allgather_base_")
    return record


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=40)
    parser.add_argument("--seed", type=int, default=4)
    parser.add_argument("--grad-scaler", action="store_true",
                        help="every case scales its loss with FSDP1's ShardedGradScaler (scaling.py)")
    parser.add_argument("-o", "--output", required=True)
    options = parser.parse_args()
    rng = random.Random(options.seed)
    cases = []
    while len(cases) < options.cases:
        doc, width, plan = random_plan(rng)
        name = f"fsdp1{'_scaled' if options.grad_scaler else ''}_{len(cases):02d}"

        def record():
            if dist.is_initialized():
                dist.destroy_process_group()
            dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=plan["world_size"])
            return record_case(doc, width, plan)

        (init, iterations), scaler_error = scaling.record(record, plan, options.grad_scaler)
        case = {"name": name, "model": dict(doc, input_features=width), "plan": plan}
        if scaler_error:
            case["grad_scaler_error"] = scaler_error
        if init:
            case["init"] = init
        case["iterations"] = iterations
        cases.append(case)
        print(f"{name}: world {plan['world_size']}, {sum(len(i) for i in iterations)} collectives", file=sys.stderr)
    out = {"recorded_with": f"PyTorch {torch.__version__}, fake process group, CPU tensors",
           "generator": "tools/golden/record_fsdp1.py" + (" --grad-scaler" if options.grad_scaler else ""),
           "family": "fsdp1", "seed": options.seed,
           "cases": cases}
    with open(options.output, "w") as f:
        f.write(compact_json(out))


if __name__ == "__main__":
    main()
