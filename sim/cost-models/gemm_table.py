#!/usr/bin/env python3
"""Derives a GEMM efficiency table (sim/README.md "Cost model") for a GPU from its one published
large-GEMM measurement, until `stratsim calibrate` measures the device itself.

The shape dependence is a model, stated here so it can be checked and replaced:
  - cuBLAS cuts C[m, n] into 128 x 128 output tiles; one tile runs on one SM.
  - When there are fewer tiles than SMs and k is long, it splits k (split-K) so more SMs work:
    it picks the split count s <= min(ceil(SMs / tiles), k // 256) with the best wave x pipe.
  - The tiles x splits CTAs run in waves of SMs: the last wave may be partly empty,
    wave = ctas / (ceil(ctas / SMs) * SMs).
  - Each CTA walks k / splits of the inner dimension; pipeline fill and epilogue cost about
    192 k-steps, so pipe = kk / (kk + 192).
  - efficiency = min(MAMF, plateau * wave * pipe), where the plateau is set so the model gives the
    published efficiency at the published best shape, and MAMF (the best any shape reached) caps
    it (Stas Bekman's ml-engineering, "Maximum Achievable Matmul FLOPS comparison table":
    brute-force search over shapes, bf16, no sparsity).
The memory-bound side (skinny shapes) is not in the table: the simulator's roofline takes the
larger of this math time and the op's bytes over achieved HBM bandwidth.

Usage: gemm_table.py DEVICE  (a100 | h100) -> a YAML block for the cost model's compute.gemm.
"""
import math
import sys

DEVICES = {
    # SMs, published MAMF efficiency, and the shape it was found at (m, n, k).
    "a100": (108, 267.9 / 312, (6912, 16384, 2048)),
    "h100": (132, 792.1 / 989, (6144, 17920, 2816)),
}
AXIS = [64 << i for i in range(10)]  # 64 .. 32768


def efficiency(sms, tiles, k, splits):
    ctas = tiles * splits
    wave = ctas / (math.ceil(ctas / sms) * sms)
    kk = k / splits
    return wave * kk / (kk + 192)


def model(sms, m, n, k):
    tiles = math.ceil(m / 128) * math.ceil(n / 128)
    most = 1 if tiles >= sms else max(1, min(math.ceil(sms / tiles), k // 256))
    return max(efficiency(sms, tiles, k, s) for s in range(1, most + 1))


def main():
    sms, mamf, best = DEVICES[sys.argv[1]]
    plateau = mamf / model(sms, *best)
    values = [min(mamf, plateau * model(sms, m, n, k)) for m in AXIS for n in AXIS for k in AXIS]
    print("    bfloat16:")
    print(f"      source: \"derived by sim/cost-models/gemm_table.py {sys.argv[1]}: tile/wave/split-K model "
          f"scaled to the published MAMF {mamf:.3f} at {best[0]}x{best[1]}x{best[2]}\"")
    axis = ", ".join(str(a) for a in AXIS)
    for name in "mnk":
        print(f"      {name}: [{axis}]")
    print("      efficiency: [")
    for i in range(0, len(values), len(AXIS)):
        print("        " + ", ".join(f"{v:.3f}" for v in values[i:i + len(AXIS)]) + ",")
    print("      ]")


if __name__ == "__main__":
    main()
