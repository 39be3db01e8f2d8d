"""Does a GEMM's speed depend on the values it multiplies? Llama 3.1 8B's forward GEMM shapes,
bfloat16, timed on operands drawn four ways, with the GPU's power draw and SM clock read while
each runs.

Why: trained in PyTorch, one H100 and one H200 ran a 4-layer Llama step's 99 GEMM kernels in
191-193 ms of kernel time (torch.profiler, gpu/measured/*.json), while the same shapes timed on
standard-normal operands (torch_gemms.py, and `stratsim calibrate --gpu` on its random fill) add
up to 207-210 ms. A GPU at its power cap lowers its clock, and a multiplier's power grows with the
bits that toggle in its operands, so values of another spread could run at another clock. Not a
dependency: run once on a GPU, its JSON committed beside it.

    python3 benchmarks/accuracy/gpu/gemm_data.py --out gemm_data.json
"""
import argparse
import json

import torch

try:
    import pynvml
except ImportError:  # the clocks and power columns are left out
    pynvml = None

# (tokens, out_features, in_features): the Linears of one Llama 3.1 8B block and the output layer at
# local batch 2, seq 8192.
SHAPES = {
    "wq/wo": (16384, 4096, 4096),
    "wk/wv": (16384, 1024, 4096),
    "w1/w3": (16384, 14336, 4096),
    "w2": (16384, 4096, 14336),
    "output": (16384, 128256, 4096),
}


def operands(kind, m, n, k):
    """Activations x [m, k] and weights w [n, k] as a training step might hold them."""
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    if kind == "normal":  # standard normal: what torch_gemms.py and calibrate multiply
        return x, w
    if kind == "init":  # a freshly initialised Linear (std 0.02) on unit-variance activations
        return x, w * 0.02
    if kind == "relu_half_zero":  # half the activations exactly zero
        return x.clamp(min=0), w * 0.02
    if kind == "zeros":
        return torch.zeros_like(x), torch.zeros_like(w)
    raise ValueError(kind)


def timed(fn, seconds=0.6):
    """Mean seconds per call over back-to-back calls lasting about `seconds`, after warm-up, and
    the power (W) and SM clock (MHz) read as the timed calls finish."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    stop.record()
    torch.cuda.synchronize()
    calls = max(5, int(seconds / (start.elapsed_time(stop) / 1e3)))
    start.record()
    for _ in range(calls):
        fn()
    stop.record()
    power = clock = None
    if pynvml is not None:
        # Read while the queue still drains the last calls: the board's averaged power of the run.
        handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        power = pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3
        clock = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / 1e3 / calls, calls, power, clock


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if pynvml is not None:
        pynvml.nvmlInit()
    rows = []
    for name, (m, n, k) in SHAPES.items():
        for kind in ("normal", "init", "relu_half_zero", "zeros"):
            x, w = operands(kind, m, n, k)
            seconds, calls, power, clock = timed(lambda: torch.mm(x, w.t()))
            tflops = 2 * m * n * k / seconds / 1e12
            rows.append({"linear": name, "data": kind, "m": m, "n": n, "k": k, "seconds": seconds, "calls": calls,
                         "tflops": tflops, "power_w": power, "sm_clock_mhz": clock})
            print(f"{name:7s} {kind:15s} ({m}, {n}, {k})  {tflops:7.1f} TFLOP/s  {power or 0:6.0f} W  {clock or 0:5d} MHz",
                  flush=True)
            del x, w
    doc = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda, "rows": rows}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
