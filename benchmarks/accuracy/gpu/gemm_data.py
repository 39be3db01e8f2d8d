"""Does a GEMM's speed depend on the values it multiplies? Llama 3.1 8B's forward GEMM shapes,
bfloat16, timed on operands drawn four ways, with the GPU's power draw and SM clock read while
each runs.

Why: trained in PyTorch, one H100 and one H200 ran a 4-layer Llama step's 99 GEMM kernels in
193 and 191 ms of kernel time (torch.profiler, gpu/measured/*.json), while the same shapes timed on
standard-normal operands (torch_gemms.py, and `stratsim calibrate --gpu` on its random fill) add
up to 207-210 ms. A GPU at its power cap lowers its clock, and a multiplier's power grows with the
bits that toggle in its operands, so values of another spread could run at another clock. Not a
dependency: run once on a GPU, its JSON committed beside it.

    python3 benchmarks/accuracy/gpu/gemm_data.py --out gemm_data.json
"""
import argparse
import json
import threading

import torch

try:
    import pynvml
except ImportError:  # the clocks and power columns are left out
    pynvml = None

from torch_gemms import LINEARS as SHAPES  # (tokens, out, in) of Llama 3.1 8B's Linears, beside this script


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


class GpuSampler:
    """Reads the GPU's power (W) and SM clock (MHz) every 10 ms on a thread while the timed calls
    run, so the figures are the run's, not the moment the calls were queued. NVML's index is taken
    to be CUDA's (true without CUDA_VISIBLE_DEVICES reordering)."""

    def __init__(self, index):
        if pynvml is not None:
            pynvml.nvmlInit()  # reference-counted: safe to repeat
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(index) if pynvml is not None else None
        self.power, self.clock = [], []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop.wait(0.01):
            self.power.append(pynvml.nvmlDeviceGetPowerUsage(self.handle) / 1e3)
            self.clock.append(pynvml.nvmlDeviceGetClockInfo(self.handle, pynvml.NVML_CLOCK_SM))

    def __enter__(self):
        if self.handle is not None:
            self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        if self.handle is not None:
            self.thread.join()

    def summary(self):
        """(mean power W, mean SM clock MHz, lowest SM clock MHz), or Nones without NVML."""
        if not self.power:
            return None, None, None
        return sum(self.power) / len(self.power), sum(self.clock) / len(self.clock), min(self.clock)


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
    with GpuSampler(torch.cuda.current_device()) as sampler:
        start.record()
        for _ in range(calls):
            fn()
        stop.record()
        torch.cuda.synchronize()
    power, clock, lowest_clock = sampler.summary()
    return start.elapsed_time(stop) / 1e3 / calls, calls, power, clock, lowest_clock


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rows = []
    for name, (m, n, k) in SHAPES.items():
        for kind in ("normal", "init", "relu_half_zero", "zeros"):
            x, w = operands(kind, m, n, k)
            seconds, calls, power, clock, lowest = timed(lambda: torch.mm(x, w.t()))
            tflops = 2 * m * n * k / seconds / 1e12
            rows.append({"linear": name, "data": kind, "m": m, "n": n, "k": k, "seconds": seconds, "calls": calls,
                         "tflops": tflops, "mean_power_w": power, "mean_sm_clock_mhz": clock,
                         "lowest_sm_clock_mhz": lowest})
            print(f"{name:7s} {kind:15s} ({m}, {n}, {k})  {tflops:7.1f} TFLOP/s  {power or 0:6.0f} W  "
                  f"{clock or 0:6.0f} MHz (lowest {lowest or 0})", flush=True)
            del x, w
    doc = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda, "rows": rows}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
