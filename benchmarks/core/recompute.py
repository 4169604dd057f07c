"""Activation checkpointing's state on one rank (`memory.checkpoint`): one object, made by the rank's
context and handed to what needs it, so a reader sees the dependency in a constructor.

- The model (`models.GNN`) marks it `active` while backward re-runs a checkpointed block.
- `Comm` counts that recompute's traffic apart (`<category>_recompute`).
- Aggregators (`aggregation.Replay`) replay rows they must not fetch twice (stale tables, posted
  exchanges, `memory.checkpoint_halo=keep`), and batch norm does not take its statistics twice.
"""
from __future__ import annotations

import contextlib


class Recompute:
    def __init__(self, halo: str | None = None):
        #: `memory.checkpoint_halo` (`refetch` | `keep`) when the run checkpoints; None when it does not.
        self.halo = halo
        #: True while backward re-runs a checkpointed block.
        self.active = False

    @contextlib.contextmanager
    def running(self):
        """The span of one recompute."""
        self.active = True
        try:
            yield
        finally:
            self.active = False
