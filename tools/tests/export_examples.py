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
    apply_tensor_parallel(model, mesh)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.layers:
        fully_shard(block, mesh=mesh["dp"], mp_policy=mp)
    fully_shard(model, mesh=mesh["dp"], mp_policy=mp)


def applied_ac_parallelize(model, mesh):
    """The same TP, then apply_activation_checkpointing on every TransformerBlock (check_fn), then
    FSDP2 in float32 per block and on the root."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing
    from record_tp import TransformerBlock
    apply_tensor_parallel(model, mesh)
    apply_activation_checkpointing(model, check_fn=lambda module: isinstance(module, TransformerBlock))
    for block in model.layers:
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])


def composable_ac_parallelize(model, mesh):
    """The same TP, then composable checkpoint() on the first block's feed-forward only."""
    from torch.distributed._composable import checkpoint
    apply_tensor_parallel(model, mesh)
    checkpoint(model.layers[0].feed_forward)
    fully_shard(model, mesh=mesh["dp"])


def composable_by_apply_parallelize(model, mesh):
    """apply_activation_checkpointing handing each block to composable checkpoint()."""
    from torch.distributed._composable import checkpoint
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing
    from record_tp import TransformerBlock
    apply_tensor_parallel(model, mesh)
    apply_activation_checkpointing(model, checkpoint_wrapper_fn=checkpoint,
                                   check_fn=lambda module: isinstance(module, TransformerBlock))
    fully_shard(model, mesh=mesh["dp"])


def reentrant_ac_parallelize(model, mesh):
    """The same TP, then reentrant checkpointing (CheckpointImpl.REENTRANT, passed positionally) of
    every block, then FSDP2 per block and on the root: each block's backward replays its whole
    forward, w2's output reduce-scatter too, before any of its own backward."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper
    apply_tensor_parallel(model, mesh)
    for i, block in enumerate(model.layers):
        model.layers[i] = checkpoint_wrapper(block, CheckpointImpl.REENTRANT)
    for block in model.layers:
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])


def apply_tensor_parallel(model, mesh):
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


def tied():
    """Embedding and output sharing one weight: the format has no shared parameters."""
    model = llama(layers=1)
    model.output.weight = model.tok_embeddings.weight
    return model


class OwnLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(4, 8))
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(nn.functional.linear(x, self.w))


def own_linear():
    """An own parameter used through F.linear, which the format cannot say (only torch.mm(x, p))."""
    return OwnLinear()


# ------------------------------------------------------------------------------------------------
# torchtitan's llama3 model as its source writes it (torchtitan/models/llama3/model.py, abridged):
# a ModuleDict of blocks called with the rotary table, complex rotary arithmetic, repeat_kv for
# grouped-query attention, SDPA behind a module, and an optional embedding.

def precompute_freqs_cis(dim, end, theta=10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)


def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = freqs_cis[: xq_.shape[1]].view(1, xq_.shape[1], 1, xq_.shape[-1])
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def repeat_kv(x, n_rep):
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return torch.unsqueeze(x, dim=3).expand(bs, slen, n_kv_heads, n_rep, head_dim).reshape(
        bs, slen, n_kv_heads * n_rep, head_dim)


class ScaledDotProductAttention(nn.Module):
    def forward(self, q, k, v):
        return nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


class TitanAttention(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads):
        super().__init__()
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.n_rep = n_heads // n_kv_heads
        self.head_dim = dim // n_heads
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)
        self.sdpa = ScaledDotProductAttention()

    def forward(self, x, freqs_cis):
        bs, seqlen, _ = x.shape
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
        xq = xq.view(bs, seqlen, -1, self.head_dim)
        xk = xk.view(bs, seqlen, -1, self.head_dim)
        xv = xv.view(bs, seqlen, -1, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)
        keys = repeat_kv(xk, self.n_rep)
        values = repeat_kv(xv, self.n_rep)
        xq, xk, xv = xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2)
        output = self.sdpa(xq, xk, xv)
        output = output.transpose(1, 2).contiguous().view(bs, seqlen, -1)
        return self.wo(output)


class TitanFeedForward(nn.Module):
    def __init__(self, dim, hidden_dim):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(nn.functional.silu(self.w1(x)) * self.w3(x))


class TitanBlock(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, hidden_dim):
        super().__init__()
        self.attention = TitanAttention(dim, n_heads, n_kv_heads)
        self.feed_forward = TitanFeedForward(dim, hidden_dim)
        self.attention_norm = nn.RMSNorm(dim, eps=1e-5)
        self.ffn_norm = nn.RMSNorm(dim, eps=1e-5)

    def forward(self, x, freqs_cis):
        h = x + self.attention(self.attention_norm(x), freqs_cis)
        out = h + self.feed_forward(self.ffn_norm(h))
        return out


class TitanTransformer(nn.Module):
    def __init__(self, dim=16, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=64, hidden_dim=32, max_seq_len=8):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab_size, dim)
        self.register_buffer("freqs_cis", precompute_freqs_cis(dim // n_heads, max_seq_len * 2), persistent=True)
        self.layers = torch.nn.ModuleDict()
        for layer_id in range(n_layers):
            self.layers[str(layer_id)] = TitanBlock(dim, n_heads, n_kv_heads, hidden_dim)
        self.norm = nn.RMSNorm(dim, eps=1e-5)
        self.output = nn.Linear(dim, vocab_size, bias=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens) if self.tok_embeddings else tokens
        for layer in self.layers.values():
            h = layer(h, self.freqs_cis)
        h = self.norm(h) if self.norm else h
        output = self.output(h) if self.output else h
        return output


def titan(**kwargs):
    return TitanTransformer(**kwargs)


def titan_parallelize(model, mesh):
    """torchtitan's apply_tp (loss parallel, sequence parallel), apply_ac (full) and apply_fsdp as
    its source calls them on the ModuleDict of blocks, attention's inputs being (x, freqs_cis)."""
    tp = mesh["tp"]
    parallelize_module(model, tp, {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False)})
    for transformer_block in model.layers.values():
        parallelize_module(transformer_block, tp, {
            "attention_norm": SequenceParallel(),
            "attention": PrepareModuleInput(input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)),
            "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(), "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
            "feed_forward.w3": ColwiseParallel()})
    # apply_ac (full): each block wrapped in checkpoint_wrapper, then apply_fsdp.
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    for layer_id, transformer_block in model.layers.named_children():
        model.layers.register_module(layer_id, checkpoint_wrapper(transformer_block, preserve_rng_state=False))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer_id, transformer_block in model.layers.items():
        reshard_after_forward = int(layer_id) < len(model.layers) - 1
        fully_shard(transformer_block, mesh=mesh["dp"], mp_policy=mp, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh["dp"], mp_policy=mp, reshard_after_forward=True)
