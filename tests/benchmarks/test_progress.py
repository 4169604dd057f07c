"""The time left that progress lines print (benchmarks/base/progress.py), from made-up times: the mean of
what is done times what is left, nothing before a step is done or once none is left."""
from __future__ import annotations

import pytest

from benchmarks.base.progress import duration, progress_line, time_left

pytestmark = pytest.mark.fast


@pytest.mark.parametrize("seconds, words", [
    (0.2, "1 s"), (12.4, "12 s"), (89, "89 s"), (90, "2 min"), (3 * 60 + 10, "3 min"), (89 * 60, "89 min"),
    (90 * 60, "1.5 h"), (10 * 3600, "10.0 h"),
])
def test_a_duration_has_no_more_digits_than_an_estimate(seconds, words):
    assert duration(seconds) == words


def test_the_time_left_is_the_mean_of_what_is_done_times_what_is_left():
    assert time_left(done=20, left=30, elapsed_s=8.0) == "~12 s left"  # 0.4 s an epoch, 30 epochs
    assert time_left(done=6, left=34, elapsed_s=30.0) == "~3 min left"  # 5 s a run, 34 runs: 170 s
    assert time_left(done=0, left=40, elapsed_s=0.0) is None  # no mean before the first is done
    assert time_left(done=50, left=0, elapsed_s=20.0) is None  # done: nothing to say


def test_a_progress_line_leaves_out_what_says_nothing():
    assert progress_line("[7/40] method=sar workers=2", "1 failed so far", "~3 min left") == \
        "[7/40] method=sar workers=2 · 1 failed so far · ~3 min left"
    assert progress_line("[1/40] method=sar", None, None) == "[1/40] method=sar"


def test_a_sweeps_first_line_says_what_it_will_run_and_the_presets_own_time():
    from benchmarks.commands.sweep import first_line

    runs = [[f"method={m}", f"workers={w}", "epochs=30"] for m in ("a", "b", "c", "d") for w in (1, 2)]
    line = first_line(runs, 1.5, warm=True)
    assert line.startswith("sweep: 8 runs to go (method: 4 values; workers: 1, 2), about 2 min on the machine its "
                           "preset was timed on; each forked from this warm process"), line
    assert "epochs" not in line  # a key every run shares is not an axis
    assert first_line(runs[:1], None, warm=False) == "sweep: 1 runs to go; each in a fresh process"
