"""Does a GEMM run faster when memory-bound kernels separate it from the next one, as in a training
step, than back to back, as calibrate and torch_gemms.py time it?

Why: inside a Llama training step (gpu/measured/*.json, "profile") the 99 GEMM kernels take 193 ms
of kernel time on an H100 and 191 on an H200, while the same shapes timed back to back on random
operands add up to 207-210 ms. A GPU near its power cap lowers its clock while it multiplies and
raises it again while kernels wait on memory, so the duty cycle may set the GEMM's rate. Each GEMM
here is timed alone with CUDA events, (a) back to back, (b) after a device-to-device copy of 1 GiB,
(c) after four, on standard-normal operands and on training-like ones (weights of std 0.02), with
the SM clock sampled while each series runs. Not a dependency: run once on a GPU, its JSON committed.

    python3 benchmarks/accuracy/gpu/gemm_duty.py --out gemm_duty.json
"""
import argparse
import json
import statistics

import torch

from gemm_data import GpuSampler  # the power and clock sampler, beside this script
from torch_gemms import LINEARS

SHAPES = {name: LINEARS[name] for name in ("wq/wo", "w1/w3", "output")}  # three of the Linears' sizes
CALLS = 20


def series(gemm, copies, src, dst):
    """Seconds of each of CALLS GEMMs, each preceded by `copies` copies of src into dst."""
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(CALLS)]
    with GpuSampler(torch.cuda.current_device()) as sampler:
        for start, stop in events:
            for _ in range(copies):
                dst.copy_(src)
            start.record()
            gemm()
            stop.record()
        torch.cuda.synchronize()
    _, clock, _ = sampler.summary()
    return [start.elapsed_time(stop) / 1e3 for start, stop in events], clock


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    rows = []
    for name, (m, n, k) in SHAPES.items():
        for data in ("normal", "init"):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * (0.02 if data == "init" else 1.0)
            gemm = lambda: torch.mm(x, w.t())  # noqa: E731
            for _ in range(3):
                gemm()
            for copies in (0, 1, 4):
                seconds, clock = series(gemm, copies, src, dst)
                median = statistics.median(seconds)
                tflops = 2 * m * n * k / median / 1e12
                rows.append({"linear": name, "m": m, "n": n, "k": k, "data": data, "copies_between": copies,
                             "median_s": median, "min_s": min(seconds), "tflops": tflops, "mean_sm_clock_mhz": clock})
                print(f"{name:7s} {data:7s} copies {copies}  median {median * 1e3:7.3f} ms  {tflops:6.1f} TFLOP/s"
                      f"  clock {clock or 0:.0f} MHz", flush=True)
            del x, w
    doc = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
