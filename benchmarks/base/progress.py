"""What progress lines say besides the step: how much time is left, as a sweep's
`[7/40] method=sar workers=2 · 1 failed so far · ~3 min left` and a run's
`epoch   20/50 ... · ~12 s left` say it. The estimate is the mean wall time of the steps done so far
times the steps left: it follows what this machine actually does (a run's evaluation included, a
sweep's kept runs, which take no time, left out), and says nothing before one step is done."""
from __future__ import annotations


def duration(seconds: float) -> str:
    """`12 s`, `3 min`, `2.5 h`: no more digits than an estimate has."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"  # never `0 s` while something is still left
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def time_left(done: int, left: int, elapsed_s: float) -> str | None:
    """`~3 min left`: `left` more steps at the mean time of the `done` ones (`elapsed_s` in all); None
    before a step is done (no mean yet) or once none is left."""
    if done < 1 or left < 1:
        return None
    return f"~{duration(elapsed_s / done * left)} left"


def progress_line(*parts: str | None) -> str:
    """A progress line: its parts that say something, joined by ` · `."""
    return " · ".join(p for p in parts if p)


def epoch_printer(epochs: int, log_every: int):
    """A run's per-epoch progress (`on_epoch(entry, left)`, rank 0's): the epoch's loss, accuracies
    and time every `log_every` epochs and at the last (none with `log_every=0`), with the time left."""
    def show(entry: dict, left: str | None = None) -> None:
        e = entry["epoch"] + 1
        if log_every and (e % log_every == 0 or e == epochs):
            acc = f" val {entry['val_acc']:.4f} test {entry['test_acc']:.4f}" if entry["val_acc"] is not None else ""
            epoch = f"  epoch {e:>4}/{epochs}  loss {entry['train_loss']:.4f}{acc}  {entry['epoch_time_s']:.3f} s"
            print(progress_line(epoch, left), flush=True)
    return show
