"""Loss scaling for the golden recorders: torch.amp.GradScaler, or ShardedGradScaler under FSDP1,
driven as a float16 training loop drives it:

    scaler.scale(loss).backward(); scaler.unscale_(optimizer); [clip_grad_norm_];
    scaler.step(optimizer); scaler.update()

A recording made with --grad-scaler gives every case's plan {"optimizer": {"grad_scaler": true}}.
Where PyTorch refuses to unscale (plain and DTensor gradients of one dtype; float16 gradients under
torch.amp.GradScaler), the recorder records the case without the scaler and keeps PyTorch's words
in the case's "grad_scaler_error": the planner must refuse the same plan with them
(tests/core/golden_vectors_test.cpp).
"""

import torch


class ScalerError(Exception):
    """PyTorch refused to unscale this case's gradients."""


def scaler_for(plan, sharded=False):
    """The case's scaler, or None when its plan does not scale."""
    if not plan.get("optimizer", {}).get("grad_scaler"):
        return None
    if sharded:
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
        return ShardedGradScaler("cpu")
    return torch.amp.GradScaler("cpu")


def backward(loss, scaler):
    (scaler.scale(loss) if scaler is not None else loss).backward()


def unscale(scaler, optimizer):
    if scaler is None:
        return
    try:
        scaler.unscale_(optimizer)
    except (RuntimeError, ValueError) as error:
        cause = error.__cause__ or error
        raise ScalerError(str(cause).strip().splitlines()[0]) from error


def step(scaler, optimizer):
    if scaler is None:
        optimizer.step()
    else:
        scaler.step(optimizer)
        scaler.update()


def record(record_case, plan, enabled):
    """record_case() with the scaler on when `enabled`; returns its result and PyTorch's refusal to
    unscale (None when it scaled or was not asked to). A refused case is recorded without it."""
    if enabled:
        plan.setdefault("optimizer", {})["grad_scaler"] = True
    try:
        return record_case(), None
    except ScalerError as error:
        drop(plan)
        return record_case(), str(error)


def drop(plan):
    optimizer = plan.get("optimizer", {})
    optimizer.pop("grad_scaler", None)
    if not optimizer:
        plan.pop("optimizer", None)
