"""Point-to-point tags are Comm's (`Comm.channel`): with one tag for every transfer
(`GNNBENCH_P2P_TAG=single`), gloo matches messages between a pair in posting order, as NCCL does,
so a method whose ranks post in different orders would hang or mix up its messages. Every method
that keeps transfers in flight while posting others (PipeGCN, DIGEST and DIGEST-A, AdaQP, SAR, CAGNET's
stages, tensor parallelism's switches) trains
to the same losses and evaluation with one tag as with its channels' tags.

Spawned ranks keep the environment their fork server started with, so the mode reaches them
through a plugin that sets it on the rank's Comm (`Comm.single_tag`) and reports the tags the rank
used. The whole file also runs under `GNNBENCH_P2P_TAG=single` (then both variants use one tag)."""
from __future__ import annotations

import os

import pytest

from tests.methods.exactness import DATASETS, run_ok

PLUGIN = """
from benchmarks.core import comm as comm_module
from methods import {base} as base

TAGS = set()


class Method(base.Method):
    def __init__(self, ctx):
        ctx.comm.single_tag = ctx.comm.single_tag or {single}
        post = comm_module.p2p_ops

        def recorded(send, to, recv, frm, tag=0):
            TAGS.add(tag)
            return post(send, to, recv, frm, tag)
        comm_module.p2p_ops = recorded  # this rank's process only
        super().__init__(ctx)

    def probes(self):
        return {{**super().probes(), "p2p_tags": sorted(TAGS)}}
"""

CASES = {
    "pipegcn": ["method=pipegcn", "workers=2"],  # pipelined: both directions of every layer in flight across epochs
    "digest": ["method=digest", "method.sync=overlapped", "method.sync_every=1", "workers=2"],  # posted every step
    "adaqp": ["method=adaqp", "method.assign_cycle=1", "workers=2"],  # mixed widths in flight at once from epoch 1
    "sar": ["method=sar", "model=gat", "workers=3", "method.prefetch=1"],  # ring rounds and refetches
    "cagnet": ["method=cagnet", "model=gat", "workers=3"],  # a root's sends to every rank; the reduce's rounds
    "tensor_parallel": ["method=tensor_parallel", "model=gat", "workers=3"],  # switches' rounds, logits' gather
}


@pytest.fixture
def plugins(write_plugins):
    write_plugins({f"{base}_{mode}": PLUGIN.format(base=base, single=mode == "single")
                   for base in CASES for mode in ("tagged", "single")})


def run_as(cfg: dict, name: str) -> dict:
    cfg["method"]["name"] = name
    _, record = run_ok(cfg)
    return record


def tags_used(record) -> set[int]:
    return {t for rank in record["summary"]["per_rank"] for t in rank["p2p_tags"]}


@pytest.mark.parametrize("method", list(CASES))
def test_one_tag_for_every_transfer_trains_as_the_channels_tags_do(make_cfg, plugins, method):
    cfg = lambda: make_cfg(*CASES[method], "epochs=3", *DATASETS["synthetic"])  # noqa: E731
    tagged, single = run_as(cfg(), f"{method}_tagged"), run_as(cfg(), f"{method}_single")
    assert tags_used(single) == {0}
    if os.environ.get("GNNBENCH_P2P_TAG") != "single":
        assert len(tags_used(tagged)) > 1  # the channel's tags besides the runtime's 0
    for key in ("train_loss", "val_acc", "comm_bytes"):
        assert [h[key] for h in single["history"]] == [h[key] for h in tagged["history"]], key


def test_digest_a_runs_with_one_tag(make_cfg, plugins):
    """DIGEST-A's ranks never wait for each other after the cold start: nothing of it may depend on
    tags either (its only point-to-point traffic is the cold-start exchange)."""
    cfg = make_cfg("method=digest", "method.asynchronous=true", "workers=2", "epochs=2", *DATASETS["synthetic"])
    assert tags_used(run_as(cfg, "digest_single")) == {0}
