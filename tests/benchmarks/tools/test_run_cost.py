"""benchmarks.tools.run_cost: a run's wall time split into phases on the critical path, from the
ranks' `timeline` probe; bad input is one line. (The probe itself: tests/benchmarks/test_launcher.py.)"""
from __future__ import annotations

import pytest

from benchmarks.tools import run_cost

pytestmark = pytest.mark.fast


def _record() -> dict:
    # Two ranks spawned at t = 100; rank 1 is the later at every moment but training's end.
    def line(entered, group_up, agreed, loaded, ready, trained, eval_s):
        return {"timeline": {"spawned": 100.0, "entered": entered, "group_up": group_up, "agreed": agreed,
                             "part_loaded": loaded, "ready": ready, "trained": trained, "eval_s": eval_s},
                "comm_blocked_s_by_category": {"halo_fwd": 1.0, "grad_allreduce": 0.5, "eval": 9.0, "probe": 9.0}}
    return {"setup": {"load_time_s": 0.5, "setup_time_s": 2.0},
            "summary": {"train_time_s": 5.0, "per_rank": [line(101.0, 103.0, 103.1, 103.2, 103.5, 110.0, 0.4),
                                                          line(101.5, 103.0, 103.2, 103.4, 103.6, 109.0, 0.6)]}}


def test_phases_follow_the_last_rank_and_add_up_to_the_wall():
    # runner.run from t = 97.5 to 111: prepared at 99.5, ranks spawned at 100.
    split = run_cost.phases(_record(), 97.5, 111.0)
    assert list(split) == list(run_cost.PHASES)
    assert split["load dataset"] == 0.5 and split["partition cache"] == 1.5 and split["launch"] == 0.5
    assert split["start"] == 1.5 and split["rendezvous"] == 1.5  # the last rank entered at 101.5
    assert split["agree"] == pytest.approx(0.2) and split["load part"] == pytest.approx(0.2)
    assert split["context"] == pytest.approx(0.2)
    assert split["evaluation"] == 0.6  # the slowest rank's
    assert split["epochs: collectives"] == 1.5 and split["epochs: compute"] == 3.5  # eval and probe apart
    assert split["loop: rest"] == pytest.approx(6.4 - 5.0 - 0.6) and split["finish"] == 1.0
    assert sum(split.values()) == pytest.approx(111.0 - 97.5)


@pytest.mark.parametrize("args, says", [
    (["dataset=cora", "--workers", "1,2"], "at least 2"),
    (["dataset=cora", "--workers", "two"], "comma list of integers"),
    (["dataset=cora", "workers=4", "--workers", "2"], "the tool's own"),
    (["dataset=cora", "method=sra", "--workers", "2"], "unknown method"),
])
def test_bad_input_is_one_line(args, says, capsys):
    with pytest.raises(SystemExit) as e:
        run_cost.main(args)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and says in err and "\n" not in err
