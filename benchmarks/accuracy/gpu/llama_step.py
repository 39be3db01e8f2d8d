#!/usr/bin/env python3
"""Real training steps of a Llama 3.1 8B-shaped model (fewer layers) on ONE GPU, trained the way
torchtitan trains it, as a reference for stratsim's compute model.

What it measures
    Per-step wall time (zero_grad, forward, loss, backward, grad-norm clip, AdamW step, then a
    device synchronize) of a Llama 3 model with the 8B widths (dim 4096, 32 heads, 8 KV heads,
    FFN 14336, vocab 128256) and --layers transformer blocks, at torchtitan's 8B training shape
    (local batch 2, seq 8192). Also the peak device memory, the model's parameter count,
    torchtitan's MFU FLOPs estimate and, with --profile, the device kernel time per step grouped
    into classes (gemm, attention, nccl, optimizer, reduction/norm, elementwise), the top 30
    kernels and "scopes": each kernel's time under the innermost FSDP2 range ("FSDP::pre_forward
    (layers.*)", "FSDP::post_backward_reduce", ...) or step phase ("step::clip_grad_norm", ...) of
    the op that launched it, with that op (the profiler links a few kernels to the wrong op:
    filter rows by op and kernel name together). --trace also writes the profiled steps as a
    Chrome trace. One process, world size 1: no network is involved, so the numbers are pure compute
    (plus launch overhead) and can be set beside the simulator's kernel-time model.

How to run (one H100, PyTorch >= 2.6; written against 2.11)
    python3 benchmarks/accuracy/gpu/llama_step.py --layers 4 --ac selective_op --profile \
        --out llama4.json
    # CPU smoke test with a tiny model (the JSON layout is the same; the numbers mean nothing):
    python3 benchmarks/accuracy/gpu/llama_step.py --device cpu --layers 2 --dim 64 --n-heads 4 \
        --n-kv-heads 2 --ffn 128 --vocab 256 --seq 32 --batch 2 --warmup 1 --steps 2 --profile

What it mirrors (reimplemented here; nothing is imported from torchtitan)
    - torchtitan/models/llama3/model/model.py (mid-2025 layout; now torchtitan/models/llama3/ and
      torchtitan/models/common/): Transformer, TransformerBlock, Attention (wq/wk/wv/wo, complex
      RoPE via precompute_freqs_cis/apply_rotary_emb, repeat_kv, SDPA is_causal), FeedForward
      (SwiGLU), nn.RMSNorm, init_weights, get_nparams_and_flops (model/args.py).
    - torchtitan/models/attention.py ScaledDotProductAttention: SDPA under
      sdpa_kernel([FLASH, EFFICIENT, MATH], set_priority=True) (cuDNN first only on sm100+), so
      an H100 runs flash attention, whose output the selective save list keeps. --sdpa cudnn
      instead follows today's torchtitan (cuDNN, flash, math; cuDNN attention saved too).
    - torchtitan/distributed/activation_checkpoint.py (as of Aug 2025): apply_ac /
      _apply_ac_to_transformer_block, "full" and "selective" with selective_ac_option="op" (the
      _save_list and the policy that recomputes every second aten.mm),
      checkpoint_wrapper(preserve_rng_state=False, early_stop=False), per block before FSDP.
      The JSON's "ac_policy" records which ops the first step really saved.
    - torchtitan/models/llama3/infra/parallelize.py apply_fsdp: fully_shard per TransformerBlock,
      then the root, MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32).
    - torchtitan/components/loss.py cross_entropy_loss, torchtitan/components/optimizer.py
      (AdamW, fused), torchtitan/distributed/utils.py clip_grad_norm_, torchtitan/train.py
      (step order, `del pred` before backward, gc disabled during training) and
      torchtitan/tools/utils.py get_peak_flops.

Known differences from a real torchtitan run
    - torchtitan on a single GPU would not apply FSDP at all (it uses torch.autocast instead).
      This script forces the FSDP2 path with world size 1 so that each step does what one rank of
      the multi-GPU FSDP run does (bf16 parameter copies, fp32 gradient reduction and optimizer),
      minus the collectives. Recent FSDP2 (2.11 included) skips the all-gather and
      reduce-scatter at world size 1 and copies instead; older releases run them on a one-rank
      NCCL communicator.
    - torchtitan since mid-2025 also shards tok_embeddings and [norm, output] as their own FSDP
      units; here they belong to the root unit, as in the simulator's plan.
    - Llama 3.1's RoPE frequency scaling (factor 8) is omitted: it changes the values in the
      precomputed freqs_cis table, not the work done per step.
    - Newer torchtitan passes enable_gqa=True to SDPA instead of repeat_kv; this uses repeat_kv.
    - Today's torchtitan saves, in selective AC, every compute-intensive op of the compiler's
      default list (aten.linear, all SDPA variants, ...), not the 2025 list used here; for this
      model the difference is only the cuDNN attention op (see --sdpa).
    - No LR scheduler, no dataloader: random tokens live on the device from the start.

This is a reference measurement, run by hand once and its JSON committed as data. PyTorch is not
a dependency of stratsim and nothing in the build or tests imports this file.
"""

import argparse
import contextlib
import gc
import gzip
import inspect
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections import defaultdict

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import record_function


# --------------------------------------------------------------------------------------------
# Model: torchtitan's llama3 Transformer.
# --------------------------------------------------------------------------------------------


def precompute_freqs_cis(dim: int, end: int, theta: float) -> torch.Tensor:
    """Complex64 rotation table [end, dim // 2], as torchtitan's precompute_freqs_cis."""
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)


def reshape_for_broadcast(freqs_cis: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    seqlen = x.shape[1]
    freqs_cis = freqs_cis[0:seqlen]
    assert freqs_cis.shape == (seqlen, x.shape[-1])
    shape = [d if i == 1 or i == x.ndim - 1 else 1 for i, d in enumerate(x.shape)]
    return freqs_cis.view(*shape)


def apply_rotary_emb(xq, xk, freqs_cis):
    # The complex-multiplication form torchtitan uses: upcast to float32, view pairs as complex,
    # multiply, view back, cast back to the activation dtype.
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = reshape_for_broadcast(freqs_cis, xq_)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return (
        torch.unsqueeze(x, dim=3)
        .expand(bs, slen, n_kv_heads, n_rep, head_dim)
        .reshape(bs, slen, n_kv_heads * n_rep, head_dim)
    )


class EagerRMSNorm(nn.Module):
    """torchtitan's own RMSNorm before it switched to nn.RMSNorm (torchtitan/models/norms.py,
    removed in March 2025): a chain of small kernels (pow, mean, add, rsqrt, mul, cast, mul).
    Note that torchtitan casts back to the input dtype *before* the weight multiply."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        return self._norm(x.float()).type_as(x) * self.weight

    def reset_parameters(self):
        nn.init.ones_(self.weight)


def build_norm(kind: str, dim: int, eps: float) -> nn.Module:
    # "fused" is what torchtitan's llama3 uses today: nn.RMSNorm (its RMSNorm config class
    # subclasses nn.RMSNorm), i.e. F.rms_norm, one fused kernel on recent CUDA builds.
    if kind == "fused":
        return nn.RMSNorm(dim, eps=eps)
    return EagerRMSNorm(dim, eps)


# SDPA backend priority, set once by main() from --sdpa. torchtitan runs SDPA inside
# sdpa_kernel(backends, set_priority=True) (torchtitan/models/attention.py
# ScaledDotProductAttention); left to itself, PyTorch 2.11 on an H100 picks cuDNN attention.
SDPA_BACKENDS: list = []
# set_priority arrived in PyTorch 2.6; before it the list only enables backends.
_SDPA_KW = (
    {"set_priority": True} if "set_priority" in inspect.signature(sdpa_kernel).parameters else {}
)


def sdpa_backend_list(kind: str, device: torch.device) -> list:
    if kind == "cudnn":
        # torchtitan today (models/common/attention.py): cuDNN first, then flash, then math.
        return [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]
    # torchtitan in 2025, the version whose selective-AC save list this script uses: flash,
    # efficient, math, with cuDNN in front only on sm100 (B200) and newer.
    backends = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    if device.type == "cuda" and torch.cuda.get_device_capability(device) >= (10, 0):
        backends.insert(0, SDPBackend.CUDNN_ATTENTION)
    return backends


def sdpa_backends_context():
    if not SDPA_BACKENDS:
        return contextlib.nullcontext()
    return sdpa_kernel(SDPA_BACKENDS, **_SDPA_KW)


class Attention(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.n_heads = a.n_heads
        self.n_kv_heads = a.n_kv_heads
        self.n_rep = self.n_heads // self.n_kv_heads
        self.head_dim = a.dim // a.n_heads
        self.wq = nn.Linear(a.dim, a.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(a.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(a.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(a.n_heads * self.head_dim, a.dim, bias=False)

    def init_weights(self, init_std: float):
        for linear in (self.wq, self.wk, self.wv):
            nn.init.trunc_normal_(linear.weight, mean=0.0, std=0.02)
        nn.init.trunc_normal_(self.wo.weight, mean=0.0, std=init_std)

    def forward(self, x, freqs_cis):
        bs, seqlen, _ = x.shape
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
        xq = xq.view(bs, seqlen, -1, self.head_dim)
        xk = xk.view(bs, seqlen, -1, self.head_dim)
        xv = xv.view(bs, seqlen, -1, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)
        keys = repeat_kv(xk, self.n_rep)
        values = repeat_kv(xv, self.n_rep)
        xq = xq.transpose(1, 2)  # (bs, heads, seqlen, head_dim)
        xk = keys.transpose(1, 2)
        xv = values.transpose(1, 2)
        with sdpa_backends_context():
            output = F.scaled_dot_product_attention(xq, xk, xv, is_causal=True)
        output = output.transpose(1, 2).contiguous().view(bs, seqlen, -1)
        return self.wo(output)


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        # torchtitan derives hidden_dim from 4*dim, ffn_dim_multiplier and multiple_of; for the
        # 8B that yields 14336, which --ffn gives directly.
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))

    def init_weights(self, init_std: float):
        nn.init.trunc_normal_(self.w1.weight, mean=0.0, std=0.02)
        for linear in (self.w2, self.w3):
            nn.init.trunc_normal_(linear.weight, mean=0.0, std=init_std)


class TransformerBlock(nn.Module):
    def __init__(self, layer_id: int, a):
        super().__init__()
        self.attention = Attention(a)
        self.feed_forward = FeedForward(a.dim, a.ffn)
        self.attention_norm = build_norm(a.norm, a.dim, a.norm_eps)
        self.ffn_norm = build_norm(a.norm, a.dim, a.norm_eps)
        # torchtitan's depth_init (default True).
        self.weight_init_std = 0.02 / (2 * (layer_id + 1)) ** 0.5

    def forward(self, x, freqs_cis):
        h = x + self.attention(self.attention_norm(x), freqs_cis)
        return h + self.feed_forward(self.ffn_norm(h))

    def init_weights(self):
        for norm in (self.attention_norm, self.ffn_norm):
            norm.reset_parameters()
        self.attention.init_weights(self.weight_init_std)
        self.feed_forward.init_weights(self.weight_init_std)


class Transformer(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.args = a
        self.tok_embeddings = nn.Embedding(a.vocab, a.dim)
        # Non-persistent buffer, recomputed by init_weights after to_empty (as torchtitan).
        self.register_buffer("freqs_cis", self._precompute_freqs_cis(), persistent=False)
        self.layers = nn.ModuleDict()
        for layer_id in range(a.layers):
            self.layers[str(layer_id)] = TransformerBlock(layer_id, a)
        self.norm = build_norm(a.norm, a.dim, a.norm_eps)
        self.output = nn.Linear(a.dim, a.vocab, bias=False)  # not tied to tok_embeddings

    def _precompute_freqs_cis(self):
        # theta 500000 as torchtitan's llama3 configs; the table only needs to cover --seq.
        return precompute_freqs_cis(self.args.dim // self.args.n_heads, self.args.seq,
                                    self.args.rope_theta)

    @torch.no_grad()
    def init_weights(self, buffer_device):
        with torch.device(buffer_device):
            self.freqs_cis = self._precompute_freqs_cis()
        nn.init.normal_(self.tok_embeddings.weight)
        for layer in self.layers.values():
            # Under AC the block is wrapped; reach the TransformerBlock itself.
            getattr(layer, "_checkpoint_wrapped_module", layer).init_weights()
        self.norm.reset_parameters()
        std = self.args.dim ** -0.5
        nn.init.trunc_normal_(self.output.weight, mean=0.0, std=std, a=-3 * std, b=3 * std)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers.values():
            h = layer(h, self.freqs_cis)
        return self.output(self.norm(h))


def nparams_and_flops_per_token(model: nn.Module, a) -> tuple[int, int]:
    """torchtitan's get_nparams_and_flops: 6 * non-embedding params per token for the matmuls
    (forward 2, backward 4), plus 12 * layers * heads * head_dim * seq for attention's two
    matmuls (no causal discount, no recomputation counted)."""
    nparams = sum(p.numel() for p in model.parameters())
    nparams_embedding = sum(
        sum(p.numel() for p in m.parameters())
        for m in model.children()
        if isinstance(m, nn.Embedding)
    )
    l, h, q, t = a.layers, a.n_heads, a.dim // a.n_heads, a.seq
    return nparams, 6 * (nparams - nparams_embedding) + 12 * l * h * q * t


def cross_entropy_loss(pred, labels):
    # torchtitan/components/loss.py: the float32 upcast of the logits is part of the step.
    return F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))


# --------------------------------------------------------------------------------------------
# Activation checkpointing: torchtitan/distributed/activation_checkpoint.py.
# --------------------------------------------------------------------------------------------


def _op(root, path):
    """An op by dotted path, or None when this torch build lacks it."""
    obj = root
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def selective_save_list(sdpa: str = "flash") -> set:
    # torchtitan's 2025 _save_list for per-op SAC. With --sdpa flash (the default) an H100 runs
    # aten._scaled_dot_product_flash_attention, which the list saves; the JSON's ac_policy
    # records the ops really saved. flex_attention is in torchtitan's list too but this model
    # never uses it.
    ops = [
        _op(torch.ops, "aten.mm.default"),
        _op(torch.ops, "aten._scaled_dot_product_efficient_attention.default"),
        _op(torch.ops, "aten._scaled_dot_product_flash_attention.default"),
        _op(torch.ops, "_c10d_functional.reduce_scatter_tensor.default"),
        # Saved for low-precision training (amax for the scaling factor); harmless here.
        _op(torch.ops, "aten.max.default"),
    ]
    if sdpa == "cudnn":
        # The 2025 list lacks the cuDNN op, so cuDNN attention would be recomputed; torchtitan
        # added every SDPA variant to its save list (Dec 2025) before it made cuDNN its first
        # choice. Save it here too, so that --sdpa cudnn is today's torchtitan.
        ops.append(_op(torch.ops, "aten._scaled_dot_product_cudnn_attention.default"))
    return {op for op in ops if op is not None}


class ACRecorder:
    """Records, while enabled, each selective-checkpoint call's decisions so that the mm
    alternation can be checked (and printed with --debug-ac). Off during timed steps."""

    def __init__(self):
        self.enabled = False
        self.calls = []  # one per checkpointed block call: {"forward": [...], "recompute": [...]}

    def new_call(self):
        if not self.enabled:
            return None
        rec = {"forward": [], "recompute": []}
        self.calls.append(rec)
        return rec

    def summary(self) -> dict:
        saved_ops = defaultdict(int)
        calls = []
        ok = bool(self.calls)
        for rec in self.calls:
            fwd_mm = [d for name, d in rec["forward"] if name == "aten.mm.default"]
            rec_mm = [d for name, d in rec["recompute"] if name == "aten.mm.default"]
            for name, d in rec["forward"]:
                if d == "save":
                    saved_ops[name] += 1
            # torchtitan's rule: the 1st, 3rd, 5th ... mm of a pass are saved, the rest
            # recomputed, and the recompute pass must count the same way as the forward.
            expect = ["save" if i % 2 == 0 else "recompute" for i in range(len(fwd_mm))]
            call_ok = fwd_mm == expect and rec_mm == fwd_mm[: len(rec_mm)]
            ok = ok and call_ok
            calls.append({
                "forward_mm": "".join("S" if d == "save" else "R" for d in fwd_mm),
                "recompute_mm": "".join("S" if d == "save" else "R" for d in rec_mm),
                "mm_saved": fwd_mm.count("save"),
                "mm_total": len(fwd_mm),
                "ok": call_ok,
            })
        return {
            "calls": calls,
            "saved_ops_forward": dict(saved_ops),
            # Whether the policy was consulted again while recomputing. Newer PyTorch (2.15)
            # replays the forward's decisions without calling it; older releases call it with
            # ctx.is_recompute=True, which is why torchtitan keeps a separate recompute count.
            "policy_called_in_recompute": any(rec["recompute"] for rec in self.calls),
            "mm_alternation_ok": ok,
        }


def apply_ac(model: Transformer, mode: str, recorder: ACRecorder, early_stop: bool,
             debug: bool, sdpa: str):
    """Wrap each TransformerBlock in place, as torchtitan's apply_ac."""
    if mode == "none":
        return
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        checkpoint_wrapper as ptd_checkpoint_wrapper,
    )

    # early_stop=False is torchtitan's default since Aug 2025 (it recomputes the whole block,
    # avoiding a leak); older PyTorch builds lack the keyword and always stop early.
    extra = {}
    if "early_stop" in inspect.signature(torch.utils.checkpoint.checkpoint).parameters:
        extra["early_stop"] = early_stop

    if mode == "full":
        def wrap(block):
            return ptd_checkpoint_wrapper(block, preserve_rng_state=False, **extra)
    else:
        from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

        save_list = selective_save_list(sdpa)
        mm = torch.ops.aten.mm.default

        def _get_custom_policy(meta, rec):
            def _custom_policy(ctx, func, *args, **kwargs):
                mode_ = "recompute" if ctx.is_recompute else "forward"
                mm_count_key = f"{mode_}_mm_count"
                if func == mm:
                    meta[mm_count_key] += 1
                # Save the output of every op in the list, except every second mm.
                to_save = func in save_list and not (func == mm and meta[mm_count_key] % 2 == 0)
                if rec is not None and (func == mm or to_save):
                    decision = "save" if to_save else "recompute"
                    rec[mode_].append((func_name(func), decision))
                    if debug:
                        what = (f"mm #{meta[mm_count_key]} {tuple(args[0].shape)}"
                                f"x{tuple(args[1].shape)}" if func == mm else func_name(func))
                        print(f"[ac] {mode_:9s} {what} -> {decision}")
                return CheckpointPolicy.MUST_SAVE if to_save else CheckpointPolicy.PREFER_RECOMPUTE

            return _custom_policy

        def selective_checkpointing_context_fn():
            # One meta per checkpoint call, shared by its forward and its recomputation; each
            # pass counts its own mms from zero.
            meta = defaultdict(int)
            return create_selective_checkpoint_contexts(
                _get_custom_policy(meta, recorder.new_call()))

        def wrap(block):
            return ptd_checkpoint_wrapper(block, context_fn=selective_checkpointing_context_fn,
                                          preserve_rng_state=False, **extra)

    for layer_id, block in model.layers.named_children():
        model.layers.register_module(layer_id, wrap(block))


def func_name(func) -> str:
    """'aten.mm.default' style name of an OpOverload (or str() of anything else)."""
    try:
        return f"{func.namespace}.{func._schema.name.split('::')[-1]}.{func._overloadname}"
    except AttributeError:
        return str(func)


# --------------------------------------------------------------------------------------------
# FSDP2, optimizer, grad clipping.
# --------------------------------------------------------------------------------------------


def apply_fsdp(model: Transformer, mesh, param_dtype, reduce_dtype):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    for block in model.layers.values():
        # reshard_after_forward=True: torchtitan's default without pipeline parallelism.
        fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=True)
    fully_shard(model, mesh=mesh, mp_policy=mp)


def clip_grad_norm_(parameters, max_norm: float, foreach: bool) -> torch.Tensor:
    """torchtitan/distributed/utils.py clip_grad_norm_ without PP/EP: the total norm of DTensor
    gradients is a partial DTensor; full_tensor() reduces it before the grads are scaled."""
    from torch.distributed.tensor import DTensor

    parameters = list(parameters)
    grads = [p.grad for p in parameters if p.grad is not None]
    if not hasattr(torch.nn.utils, "get_total_norm"):  # PyTorch < 2.6
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm, foreach=foreach)
    total_norm = torch.nn.utils.get_total_norm(grads, 2.0, False, foreach)
    if isinstance(total_norm, DTensor):
        total_norm = total_norm.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, total_norm, foreach)
    return total_norm


def peak_flops(device_name: str) -> float | None:
    """bf16 dense peak, as torchtitan's get_peak_flops (only the parts that matter here)."""
    n = device_name
    if "H100" in n or "H200" in n:
        if "NVL" in n:
            return 835e12
        if "PCIe" in n:
            return 756e12
        return 989e12
    if "B200" in n:
        return 2.25e15
    if "A100" in n:
        return 312e12
    return None


# --------------------------------------------------------------------------------------------
# Profile: device kernel time by class.
# --------------------------------------------------------------------------------------------

# First match wins. Attention before gemm because flash-attention kernel names carry
# "cutlass::bfloat16_t" template arguments; optimizer before reduction/norm so that the foreach
# grad-norm kernels (multi_tensor_apply_kernel<...LpNormFunctor>) count with the optimizer
# phase they belong to. The aten:: / _foreach_ names only match CPU ops (smoke tests).
KERNEL_CLASSES = [
    ("nccl", ("nccl",)),
    ("attention", ("flash", "fmha", "sdpa", "attention")),
    ("optimizer", ("multi_tensor", "fused_adam", "adam", "_foreach_")),
    ("gemm", ("gemm", "sm90_xmma", "cutlass", "nvjet", "cublas", "Kernel2",
              "aten::mm", "aten::bmm", "aten::addmm")),
    # softmax (the loss's log_softmax) is a row reduction too; it is not in the brief's list.
    ("reduction/norm", ("reduce", "norm", "rms", "softmax", "aten::mean", "aten::sum")),
]


def kernel_class(name: str) -> str:
    low = name.lower()
    for cls, keys in KERNEL_CLASSES:
        for k in keys:
            # "Kernel2" (a cuBLAS kernel name) is matched case-sensitively, the rest not.
            if (k in name) if k == "Kernel2" else (k.lower() in low):
                return cls
    return "elementwise"


def device_kernel_records(prof, on_cuda: bool):
    """(name, start_us, end_us) for every device activity (kernels, memcpy, memset) in the
    trace; on CPU, (name, self time) of every aten op instead, since there are no kernels."""
    if on_cuda:
        from torch.autograd import DeviceType

        out = []
        for e in prof.events():
            if e.device_type != DeviceType.CUDA:
                continue
            # GPU projections of record_function ranges are not kernels; skip them.
            if getattr(e, "is_user_annotation", False):
                continue
            if "annotation" in str(getattr(e, "activity_type", "") or ""):
                continue
            out.append((e.name, e.time_range.start, e.time_range.end))
        return out
    # CPU smoke tests only. Under selective_op the SAC dispatch modes make one op show up as
    # two events (and a cached output as one more), so op counts there overstate the work;
    # self times do not double count. CUDA kernels have no such issue.
    out = []
    for e in prof.events():
        if e.name.startswith("aten::") and e.self_cpu_time_total > 0:
            out.append((e.name, 0.0, float(e.self_cpu_time_total)))
    return out


def gemm_shapes(prof, nsteps: int) -> list:
    """Kernel time per step of every matmul shape (m, n, k) the step ran, from the profiler's
    aten::mm / aten::addmm events grouped by input shape (self time: the kernels an op launched
    itself, so a selective-AC dispatch wrapper does not count them twice)."""
    rows = []
    for e in prof.key_averages(group_by_input_shape=True):
        if e.key not in ("aten::mm", "aten::addmm"):
            continue
        matrices = [s for s in e.input_shapes if len(s) == 2]
        if len(matrices) < 2:
            continue
        (m, k), (_, n) = matrices[-2], matrices[-1]
        us = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
        if us <= 0:
            continue
        rows.append({"m": m, "n": n, "k": k, "calls_per_step": e.count / nsteps, "us_per_step": us / nsteps,
                     "tflops": 2.0 * m * n * k * e.count / (us * 1e-6) / 1e12})
    return sorted(rows, key=lambda r: -r["us_per_step"])


# Where a kernel came from: the innermost of these ranges around the op that launched it. FSDP2
# labels its own work ("FSDP::all_gather (layers.0)", the root's without a name); train_step
# labels its phases "step::*".
# Backward runs on autograd's device thread, outside the main thread's ranges: a kernel there with
# no FSDP label is the model's backward (or recompute).
SCOPE_PREFIXES = ("FSDP::", "step::")


def kernel_scopes(prof, nsteps: int) -> list:
    """Device time per step by (scope, the outermost aten op under it, kernel class, kernel), from
    the CPU op each kernel was launched by (FunctionEvent.kernels) and its parents. FSDP2's copies
    and casts, the grad-norm clip and the model's own element-wise work are told apart here."""
    rows = defaultdict(lambda: [0.0, 0])
    for e in prof.events():
        kernels = getattr(e, "kernels", None)
        if not kernels:
            continue
        scope, op, parent = "backward (autograd thread)", e.name, e
        while parent is not None:
            if parent.name.startswith(SCOPE_PREFIXES):
                # One row for all blocks: "FSDP::pre_forward (layers.3)" -> "... (layers.*)".
                scope = re.sub(r"layers\.\d+", "layers.*", parent.name)
                break
            if parent.name.startswith("aten::"):
                op = parent.name
            parent = parent.cpu_parent
        for k in kernels:
            row = rows[(scope, op, kernel_class(k.name), k.name[:160])]
            row[0] += k.duration
            row[1] += 1
    out = [{"scope": s, "op": o, "class": c, "kernel": k, "us_per_step": us / nsteps,
            "calls_per_step": n / nsteps} for (s, o, c, k), (us, n) in rows.items()]
    return sorted(out, key=lambda r: (r["scope"], -r["us_per_step"]))


def summarize_profile(records, nsteps: int, on_cuda: bool, step_wall_s) -> dict:
    by_class = defaultdict(lambda: [0.0, 0])
    by_name = defaultdict(lambda: [0.0, 0])
    for name, start, end in records:
        dur = end - start
        c = by_class[kernel_class(name)]
        c[0] += dur
        c[1] += 1
        k = by_name[name]
        k[0] += dur
        k[1] += 1
    total = sum(v[0] for v in by_class.values())
    classes = {}
    for cls in [c for c, _ in KERNEL_CLASSES] + ["elementwise"]:
        us, count = by_class.get(cls, (0.0, 0))
        classes[cls] = {
            "us_per_step": us / nsteps,
            "kernels_per_step": count / nsteps,
            "fraction": us / total if total else 0.0,
        }
    top = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:30]
    result = {
        "source": "cuda kernels (+memcpy/memset)" if on_cuda else "cpu aten ops, self time",
        "steps": nsteps,
        "step_wall_s": step_wall_s,
        "total_us_per_step": total / nsteps,
        "classes": classes,
        "top_kernels": [
            {
                "name": name[:400],
                "class": kernel_class(name),
                "count": count,
                "total_us": us,
                "us_per_step": us / nsteps,
            }
            for name, (us, count) in top
        ],
    }
    if on_cuda and records:
        # Union of kernel intervals: how long the GPU was busy at all. Kernel sums can exceed
        # this where streams overlap; wall minus this is idle time (launch gaps, host syncs).
        iv = sorted((s, e) for _, s, e in records)
        busy, cur_s, cur_e = 0.0, iv[0][0], iv[0][1]
        for s, e in iv[1:]:
            if s > cur_e:
                busy += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        busy += cur_e - cur_s
        result["busy_us_per_step"] = busy / nsteps
    return result


# --------------------------------------------------------------------------------------------
# Main.
# --------------------------------------------------------------------------------------------


def env_info(device: torch.device) -> dict:
    info = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "host": platform.node(),
        "cuda": torch.version.cuda,
    }
    try:
        info["cudnn"] = torch.backends.cudnn.version() if device.type == "cuda" else None
    except RuntimeError:  # e.g. a mismatched cuDNN on the library path
        info["cudnn"] = None
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        info["gpu"] = p.name
        info["sm_count"] = p.multi_processor_count
        info["capability"] = f"{p.major}.{p.minor}"
        info["total_memory_bytes"] = p.total_memory
        for attr in ("L2_cache_size", "clock_rate", "memory_clock_rate", "memory_bus_width"):
            if hasattr(p, attr):
                info[attr] = getattr(p, attr)
        try:
            info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:
            info["nccl"] = None
        # The driver version is not among the device properties; ask nvidia-smi.
        try:
            info["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader",
                 f"--id={device.index or 0}"],
                capture_output=True, text=True, timeout=20).stdout.strip() or None
        except Exception:
            info["driver"] = None
        info["sdp_flash_enabled"] = torch.backends.cuda.flash_sdp_enabled()
        info["sdp_cudnn_enabled"] = torch.backends.cuda.cudnn_sdp_enabled()
    else:
        info["cpu"] = platform.processor() or platform.machine()
        info["threads"] = torch.get_num_threads()
    return info


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=4096)
    p.add_argument("--n-heads", type=int, default=32)
    p.add_argument("--n-kv-heads", type=int, default=8)
    p.add_argument("--ffn", type=int, default=14336)
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--seq", type=int, default=8192)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--ac", choices=["none", "selective_op", "full"], default="selective_op")
    p.add_argument("--norm", choices=["eager", "fused"], default="fused",
                   help="fused = nn.RMSNorm (torchtitan's llama3 today, the default); eager = "
                        "torchtitan's former hand-written RMSNorm")
    p.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16",
                   help="bf16: FSDP2 MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) "
                        "as torchtitan; fp32: no mixed precision")
    p.add_argument("--sdpa", choices=["flash", "cudnn"], default="flash",
                   help="SDPA backend priority: flash = torchtitan 2025 (flash, efficient, math; "
                        "the save list of the brief's era), cudnn = torchtitan today (cuDNN, "
                        "flash, math; cuDNN attention then saved by selective_op too)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--device", default="cuda", help="cuda (the measurement) or cpu (smoke test)")
    p.add_argument("--profile", action="store_true",
                   help="profile 2 extra steps and group kernel time by class")
    p.add_argument("--trace", help="with --profile: also write the profiled steps as a Chrome trace here")
    p.add_argument("--early-stop", action="store_true",
                   help="checkpoint early_stop=True (torchtitan's default is False)")
    p.add_argument("--debug-ac", action="store_true",
                   help="print every selective-AC mm decision of the first warmup step")
    p.add_argument("--memory-trace",
                   help="record the caching allocator's every event from before the model is built "
                        "to the end of the run (torch.cuda.memory._record_memory_history, no stacks) "
                        "and write them here, gzipped JSON (see write_memory_trace)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="write the JSON here")
    a = p.parse_args(argv)
    if a.dim % a.n_heads or a.n_heads % a.n_kv_heads:
        p.error("--dim must be divisible by --n-heads, and --n-heads by --n-kv-heads")
    if (a.dim // a.n_heads) % 2:
        p.error("head_dim must be even for the rotary embedding")
    if a.warmup < 1:
        p.error("--warmup must be at least 1 (the first step builds FSDP state and is recorded "
                "for the AC check)")
    a.norm_eps = 1e-5
    a.rope_theta = 500000.0
    return a


def main(argv=None):
    a = parse_args(argv)
    device = torch.device(a.device)
    on_cuda = device.type == "cuda"
    if on_cuda:
        torch.cuda.set_device(device.index or 0)
        device = torch.device("cuda", torch.cuda.current_device())

    # World size 1, but a real process group: FSDP2 and DTensor need one.
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("nccl" if on_cuda else "gloo", rank=0, world_size=1)
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device.type, (1,), mesh_dim_names=("dp_shard",))

    SDPA_BACKENDS[:] = sdpa_backend_list(a.sdpa, device)

    torch.manual_seed(a.seed)
    if on_cuda:
        torch.cuda.manual_seed(a.seed)

    marks = []  # (phase, host time in us) for --memory-trace: allocations happen at launch, on the host

    def mark(name: str):
        if a.memory_trace:
            marks.append([name, time.time_ns() // 1000])

    if a.memory_trace and on_cuda:
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                 max_entries=4_000_000)
    mark("build")
    # As torchtitan: build on the meta device, count, apply AC, shard, then materialize on the
    # device and initialize (so the full fp32 model never sits on the host).
    with torch.device("meta"):
        model = Transformer(a)
    nparams, flops_per_token = nparams_and_flops_per_token(model, a)
    recorder = ACRecorder()
    apply_ac(model, a.ac, recorder, a.early_stop, a.debug_ac, a.sdpa)
    param_dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    apply_fsdp(model, mesh, param_dtype=param_dtype, reduce_dtype=torch.float32)
    model.to_empty(device=device)
    model.init_weights(buffer_device=device)
    model.train()

    optimizer = torch.optim.AdamW(
        model.parameters(), lr=8e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
        # torchtitan's optimizer implementation default is "fused".
        fused=on_cuda, foreach=not on_cuda)

    # Random tokens, one fixed batch; the content does not change the work (the loss falls fast
    # as the model memorizes it, which is harmless). Kept on the device so no host copy sits in
    # the timed step.
    g = torch.Generator().manual_seed(a.seed)
    inputs = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g).to(device)
    labels = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g).to(device)

    def sync():
        if on_cuda:
            torch.cuda.synchronize(device)

    def train_step() -> tuple[float, torch.Tensor, torch.Tensor]:
        t0 = time.perf_counter()
        # The ranges name each phase in a profile (kernel_scopes); they cost nothing otherwise.
        mark("zero_grad")
        with record_function("step::zero_grad"):
            optimizer.zero_grad()
        mark("forward")
        with record_function("step::forward"):
            pred = model(inputs)
        mark("loss")
        with record_function("step::loss"):
            loss = cross_entropy_loss(pred, labels)
        # torchtitan frees the logits before backward to lower the peak.
        del pred
        mark("backward")
        with record_function("step::backward"):
            loss.backward()
        mark("clip_grad_norm")
        with record_function("step::clip_grad_norm"):
            grad_norm = clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        mark("optimizer")
        with record_function("step::optimizer"):
            optimizer.step()
        sync()
        mark("end")
        return time.perf_counter() - t0, loss.detach(), grad_norm.detach()

    # torchtitan disables automatic GC during training and collects every 50 steps.
    gc.disable()
    gc.collect(1)

    warmup_s, losses = [], []
    for i in range(a.warmup):
        recorder.enabled = i == 0 and a.ac == "selective_op"
        dt, loss, gn = train_step()
        recorder.enabled = False
        warmup_s.append(dt)
        losses.append(loss.item())
        if not math.isfinite(losses[-1]) or not math.isfinite(gn.item()):
            raise SystemExit(f"non-finite loss {losses[-1]} / grad norm {gn.item()} at warmup {i}")

    if on_cuda:
        torch.cuda.reset_peak_memory_stats(device)
    steps_s = []
    for _ in range(a.steps):
        dt, loss, _ = train_step()
        steps_s.append(dt)
        losses.append(loss.item())  # after the sync: no extra wait inside the timed region
    peak_alloc = torch.cuda.max_memory_allocated(device) if on_cuda else None
    peak_reserved = torch.cuda.max_memory_reserved(device) if on_cuda else None

    profile = None
    if a.profile:
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as torch_profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
        nprof = 2
        prof_s = []
        # acc_events keeps the events without a schedule (and silences a warning) where known.
        kw = {}
        if "acc_events" in inspect.signature(torch_profile).parameters:
            kw["acc_events"] = True
        with torch_profile(activities=activities, record_shapes=on_cuda, **kw) as prof:
            for _ in range(nprof):
                dt, _, _ = train_step()
                prof_s.append(dt)
        profile = summarize_profile(device_kernel_records(prof, on_cuda), nprof, on_cuda, prof_s)
        if a.trace:
            prof.export_chrome_trace(a.trace)
        try:  # on a CPU there are no kernels: the list stays empty
            profile["scopes"] = kernel_scopes(prof, nprof)
        except Exception as err:  # noqa: BLE001
            profile["scopes_error"] = repr(err)
            try:  # the profiler's event API moves between releases: keep the run if it does
                profile["gemm_shapes"] = gemm_shapes(prof, nprof)
            except Exception as err:  # noqa: BLE001
                profile["gemm_shapes_error"] = repr(err)
    gc.enable()

    tokens_per_step = a.batch * a.seq
    median = statistics.median(steps_s)
    flops_per_step = flops_per_token * tokens_per_step
    env = env_info(device)
    peak = peak_flops(env.get("gpu", "")) if on_cuda else None
    result = {
        "config": {
            "layers": a.layers, "dim": a.dim, "n_heads": a.n_heads, "n_kv_heads": a.n_kv_heads,
            "head_dim": a.dim // a.n_heads, "ffn": a.ffn, "vocab": a.vocab, "seq": a.seq,
            "batch": a.batch, "ac": a.ac, "norm": a.norm, "dtype": a.dtype,
            "sdpa": a.sdpa, "sdpa_backends": [b.name for b in SDPA_BACKENDS],
            "param_dtype": str(param_dtype).removeprefix("torch."), "reduce_dtype": "float32",
            "norm_eps": a.norm_eps, "rope_theta": a.rope_theta, "warmup": a.warmup,
            "steps": a.steps, "device": str(device), "world_size": 1,
            "fsdp": "fully_shard per TransformerBlock, then root; reshard_after_forward=True",
            "ac_preserve_rng_state": False, "ac_early_stop": a.early_stop,
            "optimizer": {"type": "AdamW", "lr": 8e-4, "betas": [0.9, 0.95], "eps": 1e-8,
                          "weight_decay": 0.1, "fused": on_cuda, "foreach": not on_cuda},
            "max_grad_norm": 1.0, "seed": a.seed,
            "argv": sys.argv[1:] if argv is None else list(argv),
        },
        "env": env,
        "warmup_steps_s": warmup_s,
        "steps_s": steps_s,
        "mean_step_s": statistics.fmean(steps_s),
        "median_step_s": median,
        "min_step_s": min(steps_s),
        "max_step_s": max(steps_s),
        "tokens_per_step": tokens_per_step,
        "tokens_per_s": tokens_per_step / median,
        "peak_allocated_bytes": peak_alloc,
        "peak_reserved_bytes": peak_reserved,
        "model_params": nparams,
        "flops_per_token": flops_per_token,
        "flops_per_step": flops_per_step,
        "tflops_per_s": flops_per_step / median / 1e12,
        "peak_flops": peak,
        "mfu": flops_per_step / median / peak if peak else None,
        "losses": losses,
        "profile": profile,
    }
    if a.ac == "selective_op":
        result["ac_policy"] = recorder.summary()
        result["ac_policy"]["save_list"] = sorted(
            func_name(op) for op in selective_save_list(a.sdpa))

    print_summary(result)
    if a.memory_trace and on_cuda:
        write_memory_trace(a.memory_trace, result, marks, device)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
        print(f"wrote {a.out}")
    dist.destroy_process_group()
    if a.ac == "selective_op" and not result["ac_policy"]["mm_alternation_ok"]:
        raise SystemExit("selective_op: the mm save/recompute alternation check failed")


def write_memory_trace(path: str, result: dict, marks: list, device: torch.device):
    """The caching allocator's history as a replay needs it, gzipped JSON:
    "trace": [action, address, size, stream, time_us] in order, for every alloc, free_requested,
    free_completed, segment_alloc and segment_free (also segment_map/unmap under expandable
    segments) since before the model was built; "marks": [phase, host time_us] at each step
    phase's start (build, zero_grad, forward, loss, backward, clip_grad_norm, optimizer, end);
    "segments": the segments held at the end, each with its blocks (size, requested_size, state);
    "stats": torch.cuda.memory_stats() at the end (reserved_bytes.all.peak and the rest);
    "allocator_settings" as the snapshot reports them; "config" and "env" as the run's JSON."""
    snapshot = torch.cuda.memory._snapshot(device)
    torch.cuda.memory._record_memory_history(enabled=None)
    trace = [[e["action"], e["addr"], e["size"], e["stream"], e.get("time_us", 0)]
             for e in snapshot["device_traces"][device.index or 0]]
    segments = [{"address": s["address"], "total_size": s["total_size"], "stream": s["stream"],
                 "segment_type": s["segment_type"],
                 "blocks": [[b["size"], b.get("requested_size", b["size"]), b["state"]] for b in s["blocks"]]}
                for s in snapshot["segments"]]
    out = {"config": result["config"], "env": result["env"], "marks": marks, "trace": trace,
           "segments": segments, "stats": dict(torch.cuda.memory_stats(device)),
           "allocator_settings": snapshot.get("allocator_settings")}
    with gzip.open(path, "wt") as f:
        json.dump(out, f)
    print(f"wrote {path}: {len(trace)} allocator events, {len(segments)} segments at the end")


def print_summary(r: dict):
    c, e = r["config"], r["env"]
    print(f"torch {e['torch']}  cuda {e['cuda']}  "
          + (f"{e['gpu']} ({e['sm_count']} SMs, driver {e['driver']})" if "gpu" in e
             else f"cpu {e['cpu']} ({e['threads']} threads)"))
    print(f"llama3 layers={c['layers']} dim={c['dim']} heads={c['n_heads']}/{c['n_kv_heads']} "
          f"ffn={c['ffn']} vocab={c['vocab']} seq={c['seq']} batch={c['batch']} ac={c['ac']} "
          f"norm={c['norm']} dtype={c['dtype']} sdpa={c['sdpa']}  params={r['model_params']:,}")
    ms = [s * 1e3 for s in r["steps_s"]]
    print(f"step ms: median {r['median_step_s'] * 1e3:.2f}  mean {statistics.fmean(ms):.2f}  "
          f"min {min(ms):.2f}  max {max(ms):.2f}  ({len(ms)} steps after {c['warmup']} warmup)")
    line = (f"tokens/s {r['tokens_per_s']:,.0f}  flops/step {r['flops_per_step']:.4g}  "
            f"TFLOP/s {r['tflops_per_s']:.2f}")
    if r["mfu"] is not None:
        line += f"  MFU {100 * r['mfu']:.1f}%"
    print(line)
    if r["peak_allocated_bytes"] is not None:
        print(f"peak memory: allocated {r['peak_allocated_bytes'] / 2**30:.2f} GiB, "
              f"reserved {r['peak_reserved_bytes'] / 2**30:.2f} GiB")
    print(f"loss {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}")
    if "ac_policy" in r:
        ap = r["ac_policy"]
        pattern = ap["calls"][0]["forward_mm"] if ap["calls"] else "-"
        print(f"selective_op: {len(ap['calls'])} block calls recorded, mm pattern {pattern} "
              f"(S saved, R recomputed), saved ops {ap['saved_ops_forward']}, "
              f"alternation {'ok' if ap['mm_alternation_ok'] else 'FAILED'}")
    p = r["profile"]
    if p:
        head = f"profile ({p['source']}), per step: total {p['total_us_per_step'] / 1e3:.2f} ms"
        if "busy_us_per_step" in p:
            head += f", busy {p['busy_us_per_step'] / 1e3:.2f} ms"
        print(head)
        for cls, v in p["classes"].items():
            print(f"  {cls:15s} {v['us_per_step'] / 1e3:9.2f} ms  {100 * v['fraction']:5.1f}%  "
                  f"{v['kernels_per_step']:7.0f} kernels")
        for k in p["top_kernels"][:5]:
            print(f"  top {k['us_per_step'] / 1e3:8.2f} ms x{k['count'] // p['steps']:<4d} "
                  f"[{k['class']}] {k['name'][:90]}")


if __name__ == "__main__":
    main()
