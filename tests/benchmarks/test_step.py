"""The loss and the step every training loop shares (`benchmarks.run.method.loss_share`, `Method.optimize`):
the share's arithmetic, and fp16's loss scaling, which skips a step whose gradients overflowed."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from benchmarks.run.method import Method, loss_share

pytestmark = pytest.mark.fast


def test_the_share_is_the_sum_over_the_global_count_or_the_weighted_sum():
    torch.manual_seed(0)
    logits, labels = torch.randn(6, 3), torch.tensor([0, 1, 2, 0, 1, 2])
    assert torch.equal(loss_share(logits, labels, total=6), F.cross_entropy(logits, labels))
    assert torch.equal(loss_share(logits, labels), F.cross_entropy(logits, labels, reduction="sum"))
    w = torch.rand(6)
    assert torch.equal(loss_share(logits, labels, w), (F.cross_entropy(logits, labels, reduction="none") * w).sum())


def stepper(scaler: torch.amp.GradScaler):
    model = torch.nn.Linear(4, 3)
    ctx = SimpleNamespace(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), scaler=scaler, world=1)
    return Method(ctx), model


def test_fp16_scaling_unscales_the_gradients_and_skips_a_step_that_overflowed():
    x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])
    plain, m0 = stepper(torch.amp.GradScaler("cpu", enabled=False))
    scaled, m1 = stepper(torch.amp.GradScaler("cpu", init_scale=2.0 ** 10))
    m1.load_state_dict(m0.state_dict())
    plain.optimize(loss_share(m0(x), y, total=5))
    scaled.optimize(loss_share(m1(x), y, total=5))
    for a, b in zip(m0.parameters(), m1.parameters()):  # a power-of-two scale: exact
        assert torch.equal(a.grad, b.grad) and torch.equal(a, b)
    before = [p.detach().clone() for p in m1.parameters()]
    scaled.optimize(loss_share(m1(x), y, total=5) * float("inf"))
    assert all(torch.equal(a, b) for a, b in zip(before, m1.parameters()))  # skipped
    assert scaled.ctx.scaler.get_scale() == 2.0 ** 9  # and the scale halved
