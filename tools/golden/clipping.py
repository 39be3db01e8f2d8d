"""torch.nn.utils.clip_grad_norm_ for the golden recorders, as torchtitan calls it before the step.

About half the cases of a recording clip, chosen by a generator of their own so that the other
random draws, and with them every case's model and plan, stay what they were without clipping.
A plan clips when it says {"optimizer": {"max_norm": ...}}. Where PyTorch refuses to clip (plain
and DTensor gradients mixed, DTensors on different meshes), the recorder records the case without
clipping and keeps PyTorch's words in the case's "clip_error": the planner must refuse the same
plan with them (tests/core/golden_vectors_test.cpp).
"""

import random

import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore


class ClipError(Exception):
    """PyTorch refused to clip this case's gradients."""


def chosen(seed, index):
    return random.Random(f"clip {seed} {index}").random() < 0.5


def clip(model, plan):
    max_norm = plan.get("optimizer", {}).get("max_norm")
    if not max_norm:
        return
    try:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm, foreach=True)
    except (RuntimeError, ValueError) as error:
        # DTensor wraps a sharding failure in a RuntimeError naming the op; the cause says why.
        cause = error.__cause__ or error
        raise ClipError(str(cause).strip().splitlines()[0]) from error


def fresh_process_group(world_size):
    """A fake process group of its own per recording: a case's groups are named as if it ran alone."""
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)


def record(record_case, plan, seed, index, *args):
    """record_case(*args) on a fresh process group, with clipping on for the chosen cases; returns
    its result and PyTorch's refusal (None when it clipped or was not asked to)."""
    if chosen(seed, index):
        plan.setdefault("optimizer", {})["max_norm"] = 1.0
    try:
        fresh_process_group(plan["world_size"])
        return record_case(*args), None
    except ClipError as error:
        del plan["optimizer"]["max_norm"]
        if not plan["optimizer"]:
            del plan["optimizer"]
        fresh_process_group(plan["world_size"])
        return record_case(*args), str(error)
