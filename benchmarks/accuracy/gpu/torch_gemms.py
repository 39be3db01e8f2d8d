"""PyTorch's own matmuls at Llama 3.1 8B's training shapes, for checking `stratsim calibrate --gpu`.

calibrate times cuBLAS GEMMs in one layout (row-major NN) on a grid of sizes; the simulator
interpolates that table. A Linear's forward (x @ W^T), its input gradient (g @ W) and its weight
gradient (g^T @ x) use three layouts; this script times each through PyTorch (bfloat16, float32
accumulation, as training runs them) so the table's interpolated rate can be compared with what
PyTorch reaches. Not a dependency: run once on a GPU, its JSON committed beside it.

    python3 benchmarks/accuracy/gpu/torch_gemms.py --out torch_gemms.json
    python3 benchmarks/accuracy/gpu/torch_gemms.py --cool-s 0.5 --out torch_gemms_cool.json
"""
import argparse
import json
import time

import torch

# (tokens, out_features, in_features) of the Linears in one Llama 3.1 8B block at local batch 2,
# seq 8192 (16384 tokens), and the output projection over the vocabulary.
LINEARS = {
    "wq/wo": (16384, 4096, 4096),
    "wk/wv": (16384, 1024, 4096),
    "w1/w3": (16384, 14336, 4096),
    "w2": (16384, 4096, 14336),
    "output": (16384, 128256, 4096),
}


def timed(fn, repeats=20, cool_s=0.0):
    """Mean GPU seconds per call over `repeats` back-to-back calls, after three warm-ups. With
    `cool_s`, the GPU idles that long first and the result is the fastest single call of
    `repeats`: the rate at the clock an idle GPU starts from, before the power cap pulls it down."""
    for _ in range(3):
        fn()
    if cool_s > 0:
        torch.cuda.synchronize()
        time.sleep(cool_s)
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
        for start, stop in events:
            start.record()
            fn()
            stop.record()
        torch.cuda.synchronize()
        return min(start.elapsed_time(stop) for start, stop in events) / 1e3
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / 1e3 / repeats


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--cool-s", type=float, default=0.0,
                        help="idle this long before each shape and report its fastest of 3 calls")
    args = parser.parse_args()
    rows = []
    for name, (t, out_f, in_f) in LINEARS.items():
        x = torch.randn(t, in_f, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(out_f, in_f, device="cuda", dtype=torch.bfloat16)
        g = torch.randn(t, out_f, device="cuda", dtype=torch.bfloat16)
        flops = 2.0 * t * out_f * in_f
        # The simulator's GemmShape (m, n, k) of each: forward (t, out, in), grad_input
        # (t, in, out), grad_weight (out, in, t).
        for kind, shape, fn in (
            ("forward", (t, out_f, in_f), lambda: torch.nn.functional.linear(x, w)),
            ("grad_input", (t, in_f, out_f), lambda: g @ w),
            ("grad_weight", (out_f, in_f, t), lambda: g.t() @ x),
        ):
            seconds = timed(fn, 3, args.cool_s) if args.cool_s > 0 else timed(fn)
            rows.append({"linear": name, "kind": kind, "m": shape[0], "n": shape[1], "k": shape[2],
                         "seconds": seconds, "tflops": flops / seconds / 1e12})
            print(f"{name:8} {kind:12} {shape!s:24} {flops / seconds / 1e12:7.1f} TFLOP/s")
        del x, w, g
        torch.cuda.empty_cache()
    props = torch.cuda.get_device_properties(0)
    with open(args.out, "w") as f:
        json.dump({"gpu": props.name, "torch": torch.__version__, "cuda": torch.version.cuda, "cool_s": args.cool_s,
                   "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
