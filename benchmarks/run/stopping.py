"""Early stopping as the papers do it (`stopping`, `patience`), and which epoch's model a run reports.

- `none`: every epoch runs; the run reports the model of the best validation accuracy (the suite's rule
  for every preset that does not reproduce a paper's stopping).
- `window` (Kipf & Welling, tkipf/gcn train.py, `early_stopping=10`): after epoch `patience`, stop once
  the validation loss exceeds the mean of the `patience` epochs before it; the run reports the model it
  stopped with. The loss is the reference's `model.loss`: the cross-entropy plus the weight-decay term
  of the parameters that decay (0.5 x weight_decay x their squared norm, tf.nn.l2_loss).
- `patience` (Velickovic et al., PetarV-/GAT execute_cora.py, `patience=100`): an epoch whose
  validation accuracy is at least the best so far or whose loss (cross-entropy) is at most the lowest
  so far resets the count; stop after `patience` epochs without either. The run reports the model of
  the last epoch that met both (the reference's checkpoint, restored before testing).
- `plateau` (the suite's comparison at convergence, experiment=findings): stop after `patience` epochs
  without a strictly better validation accuracy; the run reports the model of the best validation
  accuracy, as under `none`. `patience` selects the model that bettered accuracy and loss together,
  which on a run whose validation loss rises while its accuracy still climbs (local rounds with
  averaging: psgd_pa on Cora, P = 2) is an early epoch (epoch 1 of 300: test 68 % where the best
  validation accuracy's model has 79 %); a tie does not reset the count, so a flat stretch ends the run.

The history holds every epoch's exact evaluation (`train.evaluate`: accuracies and validation
cross-entropy), so the reported model's test accuracy is read from it: evaluation is deterministic, so
restoring a checkpoint and testing it gives the same number.
"""
from __future__ import annotations

STOPPING = ("none", "window", "patience", "plateau")


class Stopper:
    """Decides after each evaluated epoch whether training stops (`stopping`'s rule)."""

    def __init__(self, rule: str, patience: int):
        self.rule, self.patience = rule, patience
        self.losses: list[float] = []
        self.best_acc, self.lowest_loss, self.waited = float("-inf"), float("inf"), 0

    def stop(self, val_loss: float, val_acc: float) -> bool:
        """True when training ends after this epoch. `val_loss`: the rule's loss (module docstring)."""
        if self.rule == "window":
            self.losses.append(val_loss)
            previous = self.losses[-self.patience - 1:-1]
            return len(self.losses) > self.patience + 1 and val_loss > sum(previous) / len(previous)
        if self.rule == "patience":
            if val_acc >= self.best_acc or val_loss <= self.lowest_loss:
                self.best_acc, self.lowest_loss = max(val_acc, self.best_acc), min(val_loss, self.lowest_loss)
                self.waited = 0
            else:
                self.waited += 1
            return self.waited >= self.patience
        if self.rule == "plateau":
            if val_acc > self.best_acc:
                self.best_acc, self.waited = val_acc, 0
            else:
                self.waited += 1
            return self.waited >= self.patience
        return False


def selected(history: list[dict], rule: str) -> dict | None:
    """The history entry of the model the run reports under `rule` (None: nothing was evaluated)."""
    evaluated = [h for h in history if h.get("val_acc") is not None]
    if not evaluated:
        return None
    if rule == "window":
        return evaluated[-1]
    if rule == "patience":
        chosen, best_acc, lowest_loss = evaluated[0], float("-inf"), float("inf")
        for h in evaluated:
            if h["val_acc"] >= best_acc and h["val_loss"] <= lowest_loss:
                chosen = h
            if h["val_acc"] >= best_acc or h["val_loss"] <= lowest_loss:
                best_acc, lowest_loss = max(h["val_acc"], best_acc), min(h["val_loss"], lowest_loss)
        return chosen
    return max(evaluated, key=lambda h: h["val_acc"])
