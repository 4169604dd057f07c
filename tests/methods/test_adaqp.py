"""AdaQP (methods/adaqp.py): at full precision it is `full_halo` (losses, gradients, bytes) with the
central/marginal overlap on or off; adaptive, the halo bytes are exactly the mixed-width volume of
the recorded assignments, overlap and checkpointing change nothing, and it trains close to
`full_halo`; the width solver's lambda limits; bad options are one line."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from benchmarks.core.aggregation import HaloPlan
from benchmarks.base.errors import UserError
from benchmarks.core.models import build_model
from benchmarks.core.quantize import Codec
from benchmarks.run.runner import plan
from methods.adaqp import FULL, WIDTHS, Widths, assign_widths
from tests.benchmarks.test_comm import mirror  # noqa: F401  (fixture)
from tests.methods.exactness import DATASETS, analytic_bytes, assert_comm, assert_matches, grads_of, run_ok

COMMON = ["workers=3", *DATASETS["synthetic"]]  # a random partition: big halos, every rank talks to every rank


@pytest.mark.parametrize("model", ["sage", "gat"])
def test_full_precision_is_full_halo_with_or_without_overlap(make_cfg, model):
    common = [*COMMON, f"model={model}", "probe_grads=true"]
    path, full_halo = run_ok(make_cfg("method=full_halo", *common))
    for overlap in ("true", "false"):
        cfg = make_cfg("method=adaqp", "method.bits=32", f"method.overlap={overlap}", *common)
        adaqp_path, record = run_ok(cfg)
        label = f"{model}, overlap={overlap}"
        assert_matches(record, adaqp_path, full_halo, grads_of(path), label)
        assert_comm(record, cfg, analytic_bytes(record, cfg), label)  # full_halo's bytes, no assignment traffic
        assert all(r["adaqp"]["assignments"] == [] for r in record["summary"]["per_rank"])


def row_bytes(bits: int, width: int) -> int:
    return width * 4 if bits == FULL else Codec(f"int{bits}").payload_bytes(1, width)


def losses(record) -> list[float]:
    return [h["train_loss"] for h in record["history"]]


def halo_bytes(record) -> int:
    got = record["comm"]["bytes_by_category"]
    return got["halo_fwd"] + got["halo_bwd"]


def test_adaptive_sends_the_assigned_widths_and_trains_close_to_full_halo(make_cfg):
    epochs, cycle = 8, 3
    common = [*COMMON, "model=sage", f"epochs={epochs}", "eval_every=8"]
    _, exact = run_ok(make_cfg("method=full_halo", *common))
    cfg = make_cfg("method=adaqp", f"method.assign_cycle={cycle}", *common)
    _, record = run_ok(cfg)
    # Overlap off and a checkpointed recompute (whose halo rows are replayed, not sent again): the same
    # training up to the order of float sums (after which a code may round the other way).
    _, same = run_ok(make_cfg("method=adaqp", f"method.assign_cycle={cycle}", "method.overlap=false",
                              "memory.checkpoint=layer", *common))
    assert losses(same) == pytest.approx(losses(record), rel=1e-3)
    assert "halo_fwd_recompute" not in same["comm"]["bytes_by_category"]
    assert halo_bytes(same) == pytest.approx(halo_bytes(record), rel=0.01)

    # Bytes: every row at 8 bits until the first assignment, then each assignment's widths.
    g = record["graph"]
    model = build_model("sage", g["features"], cfg["hidden"], g["classes"], cfg["layers"], 0.0, 0)
    width = {layer: w for layer, (w, _) in enumerate(model.exchanges())}
    want = {"halo_fwd": 0, "halo_bwd": 0}
    used = set()
    for rank in record["summary"]["per_rank"]:
        probe = rank["adaqp"]
        assert [a["epoch"] for a in probe["assignments"]] == list(range(cycle, epochs, cycle))
        schedule = [(0, {key: {"8": sum(h.values())} for key, h in probe["widths"].items()})]
        schedule += [(a["epoch"], a["widths"]) for a in probe["assignments"]]
        for (start, widths), (end, _) in zip(schedule, schedule[1:] + [(epochs, None)]):
            for key, histogram in widths.items():
                direction, layer = key.split("/")
                want[direction] += (end - start) * sum(rows * row_bytes(int(b), width[int(layer)])
                                                       for b, rows in histogram.items())
                used |= {int(b) for b in histogram}
        assert probe["assign_s"] > 0
    got = record["comm"]["bytes_by_category"]
    assert {c: got[c] for c in want} == want
    assert used == set(WIDTHS)  # the assignment mixes widths
    assert {c for c in got if c not in ("setup", "eval", "probe")} == {"halo_fwd", "halo_bwd", "grad_allreduce",
                                                                        "adaqp_assign"}
    assert halo_bytes(record) < 0.35 * halo_bytes(exact)  # 16 wide: a row at 8 bits is 24 bytes against 64
    # Unbiased messages: training follows full_halo's closely.
    assert losses(record) == pytest.approx(losses(exact), rel=0.03)
    assert record["history"][-1]["val_acc"] == pytest.approx(exact["history"][-1]["val_acc"], abs=0.03)


def objective_terms(channels, bits, width):
    """(total variance, bytes of the busiest channel) of an assignment."""
    variance = sum(float((s / ((1 << b.astype(np.int64)) - 1) ** 2).sum()) for s, b in zip(channels, bits))
    busiest = max(sum(Codec(f"int{int(x)}").payload_bytes(1, width) for x in b) for b in bits)
    return variance, busiest


@pytest.mark.fast
@pytest.mark.parametrize("group_size", [1, 4])
def test_solver_lambda_limits_and_trade_off(group_size):
    rng = np.random.default_rng(0)
    channels = [rng.exponential(size=n) for n in (30, 70, 50)]
    channels[1][:8] = 0.0  # rows that never vary (or that nobody aggregates): exact at any width
    width = 16
    # lambda = 1: the variance alone: every row with a non-zero score at 8 bits (the others cost nothing at 2).
    for scores, bits in zip(channels, assign_widths(channels, width, 1.0, group_size)):
        np.testing.assert_array_equal(bits, np.where(scores > 0, 8, 2))
    # lambda = 0: the transfer alone: the busiest channel all at 2 bits, the others within its bytes.
    bits = assign_widths(channels, width, 0.0, group_size)
    assert (bits[1] == 2).all()
    assert objective_terms(channels, bits, width)[1] == 70 * Codec("int2").payload_bytes(1, width)
    # In between: more weight on the variance buys less variance with more bytes; widths follow scores
    # within a channel (a higher score never gets fewer bits than a lower one in another group).
    terms = [objective_terms(channels, assign_widths(channels, width, lam, group_size), width)
             for lam in (0.0, 0.3, 0.5, 0.7, 1.0)]
    assert [v for v, _ in terms] == sorted((v for v, _ in terms), reverse=True)
    assert [t for _, t in terms] == sorted(t for _, t in terms)
    for scores, bits in zip(channels, assign_widths(channels, width, 0.5, group_size)):
        order = np.argsort(-scores, kind="stable")
        assert (np.diff(bits[order][scores[order] > 0].astype(int)) <= 0).all()
    assert {int(b) for bits in assign_widths(channels, width, 0.5, group_size) for b in bits} == set(WIDTHS)


@pytest.mark.fast
def test_rows_of_mixed_widths_arrive_decoded_in_their_places(mirror):  # noqa: F811
    """One all-to-all per width; each received row lands where it belongs, within its width's
    quantisation step (exact at 32 bits), and is counted at its width's payload size."""
    from benchmarks.core.comm import Comm
    ctx = SimpleNamespace(comm=Comm(rank=0, world=2), plan=HaloPlan(torch.arange(6), [0, 6], [0, 6]),
                          cfg=SimpleNamespace(seed=0),
                          rank=0, world=2, device=torch.device("cpu"),
                          model=SimpleNamespace(exchanges=lambda: [(10, False)]))
    widths, key = Widths(ctx, 8, 0.5, 1), ("halo_fwd", 0)
    bits = torch.tensor([2, 8, 4, FULL, 8, 2], dtype=torch.int8)
    widths.bits[key] = (bits, bits)  # the stand-in peer sends me what I send it, at the same widths
    widths.routes[key] = widths.route(key)
    rows = torch.randn(6, 10)
    got = widths.post(rows, key).wait()
    step = (rows.amax(1) - rows.amin(1)) / (2.0 ** bits.double() - 1).float()
    assert ((got - rows).abs().amax(1) <= step + 1e-6).all()
    assert torch.equal(got[3], rows[3])
    assert ctx.comm.by_category() == {"halo_fwd": sum(row_bytes(int(b), 10) for b in bits)}


@pytest.mark.fast
def test_a_single_row_of_odd_payload_width_decodes():
    """One row whose payload is not a multiple of 4 bytes (5 wide at 8 bits: 13 bytes): its header
    slice must still be read as fp32 (a row of a layer 5 wide sent alone to a peer)."""
    x = torch.randn(1, 5)
    for name in ("int8", "int4", "int2"):
        codec = Codec(name)
        assert (codec.decode(codec.encode(x), (1, 5)) - x).abs().max() <= (x.max() - x.min()) / ((1 << codec.bits) - 1)


@pytest.mark.fast
@pytest.mark.parametrize("overrides, message", [
    (["method.bits=16"], "unknown method.bits '16'; choose one of: 2, 4, 8, 32, adaptive"),
    (["method.variance_weight=1.5"], r"method.variance_weight=1.5 must be a number in \[0, 1\]"),
    (["method.assign_cycle=0"], "method.assign_cycle=0 must be a positive integer"),
    (["method.group_size=0"], "method.group_size=0 must be a positive integer"),
    (["comm.quantize=int8"], "method=adaqp chooses its halo messages' widths itself"),
])
def test_bad_options_are_one_line_errors(make_cfg, overrides, message):
    with pytest.raises(UserError, match=message) as e:
        plan(make_cfg("method=adaqp", *overrides))
    assert "\n" not in str(e.value)
