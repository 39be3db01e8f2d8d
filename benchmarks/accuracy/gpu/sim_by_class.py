#!/usr/bin/env python3
"""Simulated compute time per step by kernel source, the way llama_step.py --profile files a
measured step: GEMM, attention, FSDP2's copy kernels, grad-norm clipping, the optimizer, and the
model's own element-wise and norm kernels (each of its op classes listed too). Reads a timeline
that `stratsim simulate --timeline FILE` wrote; one rank, one iteration (default: the last).

    python3 benchmarks/accuracy/gpu/sim_by_class.py TIMELINE.json [--iteration N] [--rank R]

Standard library only. The sums are of op durations: ops on other streams that overlap the
compute stream count in full, as a profiler's per-kernel sums do.
"""
import argparse
import collections
import json
import sys


def fail(message):
    print(f"sim_by_class.py: {message}", file=sys.stderr)
    sys.exit(2)


def source_of(op):
    """The kernel source an op belongs to, as benchmarks/README.md's by-source table names them."""
    role = op.get("role")
    if role == "fsdp2_copy":
        return "FSDP2 kernels"
    if role == "clip_grad_norm":
        return "clip_grad_norm_"
    if role == "optimizer":
        return "optimizer step"
    if op["op_class"] == "gemm":
        return "GEMM"
    if op["op_class"] == "attention":
        return "attention"
    return "model element-wise and norm"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("timeline")
    parser.add_argument("--iteration", type=int, default=0, help="1-based; default: the last")
    parser.add_argument("--rank", type=int, default=0)
    args = parser.parse_args()
    try:
        with open(args.timeline) as f:
            document = json.load(f)
        ops = document["program"]["ops"]
        timings = document["run"]["timings"]
    except (OSError, ValueError, KeyError) as error:
        fail(f"{args.timeline}: not a stratsim timeline ({error})")
    if not 0 <= args.rank < len(timings):
        fail(f"--rank {args.rank}: the timeline has {len(timings)} recorded rank(s)")
    iteration = args.iteration or max(op["iteration"] for op in ops)
    timing = timings[args.rank]
    by_source = collections.defaultdict(float)
    by_class = collections.defaultdict(float)
    for op in ops:
        if op["type"] != "compute" or op["iteration"] != iteration:
            continue
        seconds = timing["end_s"][op["id"]] - timing["start_s"][op["id"]]
        source = source_of(op)
        by_source[source] += seconds
        if source == "model element-wise and norm":
            by_class[op["op_class"]] += seconds
    print(f"iteration {iteration}, rank {args.rank}: simulated compute by source (ms)")
    for source, seconds in sorted(by_source.items(), key=lambda item: -item[1]):
        print(f"  {source:30s} {seconds * 1e3:9.2f}")
        if source == "model element-wise and norm":
            for op_class, class_seconds in sorted(by_class.items(), key=lambda item: -item[1]):
                print(f"    {op_class:28s} {class_seconds * 1e3:9.2f}")
    print(f"  {'total':30s} {sum(by_source.values()) * 1e3:9.2f}")


if __name__ == "__main__":
    main()
