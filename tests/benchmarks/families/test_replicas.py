"""Rounds of local steps (PSGD-PA, LLCG, GGS): LLCG's schedule for K and the options' one-line
errors, checked before any rank starts."""
from __future__ import annotations

import pytest

from benchmarks.base.errors import UserError
from benchmarks.families.replicas import local_steps_schedule
from benchmarks.run.runner import run
from tests.conftest import SMALL_SYNTHETIC

pytestmark = pytest.mark.fast


def test_the_local_steps_grow_to_k_or_shrink_from_k_by_rho_a_round():
    # LLCG's code: K_r = ceil(K / rho^r), reversed with inc_k.
    assert local_steps_schedule(8, 1.0, 4, "increase") == [8, 8, 8, 8]
    assert local_steps_schedule(8, 2.0, 4, "increase") == [1, 2, 4, 8]
    assert local_steps_schedule(8, 2.0, 5, "decrease") == [8, 4, 2, 1, 1]
    assert local_steps_schedule(64, 1.1, 3, "decrease") == [64, 59, 53]  # 64/1.1 = 58.2, 64/1.21 = 52.9


def test_a_schedule_whose_rho_to_the_r_overflows_a_float_takes_one_step_a_round():
    """D3: 1.5^1799 and (1e308)^2 overflow a float; the rounds they reach take one local step."""
    steps = local_steps_schedule(8, 1.5, 1800, "increase")
    assert len(steps) == 1800 and steps[-3:] == [4, 6, 8] and set(steps[:-6]) == {1}
    assert local_steps_schedule(8, 1e308, 3, "decrease") == [8, 1, 1]


@pytest.mark.parametrize("overrides, message", [
    (["method=psgd_pa", "method.local=half"], "unknown method.local 'half'; choose one of: full, sampled"),
    (["method=psgd_pa", "method.local_steps=0"], "method.local_steps=0 must be a positive integer"),
    (["method=psgd_pa", "method.local_steps=null"], "method.local_steps=None must be a positive integer"),
    (["method=psgd_pa", "method.local_steps_rho=0.5"], "method.local_steps_rho=0.5 must be a number >= 1"),
    (["method=psgd_pa", "method.local_steps_schedule=up"], "unknown method.local_steps_schedule 'up'"),
    (["method=psgd_pa", "method.fanouts=[10,10]"], "method.fanouts=[10, 10] has 2 entries but layers=3"),
    (["method=psgd_pa", "method.batch_size=0"], "method.batch_size=0 must be a positive integer"),
    (["method=llcg", "method.correction=exact"], "unknown method.correction 'exact'; choose one of: full, sampled"),
    (["method=llcg", "method.server_fanouts=[5,5]"], "method.server_fanouts=[5, 5] has 2 entries but layers=3"),
    (["method=llcg", "method.server_batch_size=0"], "method.server_batch_size=0 must be a positive integer"),
    (["method=ggs", "method.local_steps=0"], "method.local_steps=0 must be a positive integer"),
])
def test_bad_options_are_named(make_cfg, overrides, message):
    with pytest.raises(UserError, match=message.replace("[", r"\[")):
        run(make_cfg(*overrides, *SMALL_SYNTHETIC))
