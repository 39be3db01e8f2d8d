"""Model factories and parallelize functions for tools/tests/test_stratsim_export.py: what a user
hands stratsim-export (module:function)."""

import os
import sys

import torch
import torch.nn as nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                               SequenceParallel, parallelize_module)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden"))
from record_tp import Transformer  # noqa: E402  (torchtitan's Llama, small)


def llama(layers=2, dim=16, heads=4, kv_heads=2, ffn=32, vocab=64, seq=8):
    return Transformer({"layers": layers, "dim": dim, "heads": heads, "kv_heads": kv_heads, "ffn": ffn,
                        "vocab": vocab, "seq": seq})


def torchtitan_parallelize(model, mesh):
    """torchtitan's parallelize_llama: TP with sequence parallelism and loss parallel on "tp", then
    FSDP2 per block and on the root on "dp" (bfloat16 parameters, float32 reductions)."""
    tp = mesh["tp"]
    parallelize_module(model, tp, {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False)})
    for block in model.layers:
        parallelize_module(block, tp, {
            "attention_norm": SequenceParallel(),
            "attention": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(), "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
            "feed_forward.w3": ColwiseParallel()})
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.layers:
        fully_shard(block, mesh=mesh["dp"], mp_policy=mp)
    fully_shard(model, mesh=mesh["dp"], mp_policy=mp)


def bad_parallelize(model, mesh):
    """PyTorch refuses this plan: Colwise on a norm."""
    parallelize_module(model, mesh["tp"], {"norm": ColwiseParallel()})


class Gated(nn.Module):
    """A residual MLP with a data-dependent branch (not traceable) in a child."""

    def __init__(self):
        super().__init__()
        self.up = nn.Linear(8, 32)
        self.act = nn.GELU()
        self.down = nn.Linear(32, 8)

    def forward(self, x):
        if x.sum() > 0:  # data-dependent: torch.fx cannot trace it
            return self.down(self.act(self.up(x)))
        return self.down(self.act(self.up(x)))


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(Gated(), Gated())
        self.head = nn.Linear(8, 4)
        self.scale = nn.Parameter(torch.ones(4, 4))

    def forward(self, x):
        return torch.mm(self.head(self.blocks(x)), self.scale)


def mlp():
    return Mlp()


class WithConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        return self.fc(self.conv(x).mean((2, 3)))


def with_conv():
    return WithConv()
