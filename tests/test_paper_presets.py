"""Every preset that claims a paper's regime says, item by item, what it follows and where it deviates:
a preset that sets `reproduces` (and gas, which claims the GAS authors' regime without a table) carries
a `regime` with each of `REGIME_ITEMS`, every statement starting with a verdict; and the check itself
refuses a regime that leaves an item out. The presets are composed as the sweep composes them
(`config_of`), so a mini preset that inherits its full preset's regime (planetoid_baselines_mini)
is read with what it inherits."""
from __future__ import annotations

import pytest

from benchmarks.commands.composition import config_of
from benchmarks.run.config import REGIME_ITEMS, REGIME_VERDICTS, check_regime
from benchmarks.base.errors import UserError
from benchmarks.base.registry import group_options

pytestmark = pytest.mark.fast

PRESETS = group_options("experiment")
#: presets that claim a paper's regime without a reference table to reproduce
REGIME_WITHOUT_TABLE = ("gas",)


def composed(preset: str) -> dict:
    return config_of([f"experiment={preset}"])


def statements(said) -> list:
    return said if isinstance(said, list) else [said]


def assert_whole_regime(preset: str, regime) -> None:
    assert isinstance(regime, dict) and regime, f"{preset}: no regime"
    assert set(regime) == set(REGIME_ITEMS), f"{preset}: regime items {sorted(regime)}"
    for item in REGIME_ITEMS:
        said = statements(regime[item])
        assert said, f"{preset}: regime.{item} is empty"
        for text in said:
            assert isinstance(text, str) and text.startswith(REGIME_VERDICTS), f"{preset}: regime.{item}: {text!r}"
            verdict = next(v for v in REGIME_VERDICTS if text.startswith(v))
            assert text[len(verdict):].strip(), f"{preset}: regime.{item} says {verdict} and nothing else"
    check_regime(regime)  # the run config's own check passes it too


@pytest.mark.parametrize("preset", PRESETS)
def test_a_preset_that_claims_a_papers_regime_states_it_item_by_item(preset):
    cfg = composed(preset)
    if cfg.get("reproduces") or preset in REGIME_WITHOUT_TABLE:
        assert_whole_regime(preset, cfg.get("regime"))
    elif cfg.get("regime") is not None:  # any preset that states a regime states all of it
        assert_whole_regime(preset, cfg["regime"])


def test_the_paper_presets_are_the_ones_checked():
    # a guard against the loop above checking nothing: the presets that reproduce a table, full and mini
    reproducing = {p for p in PRESETS if composed(p).get("reproduces")}
    for stem in ("bns_gcn_paper", "digest_paper", "llcg_table1", "ogb_products", "pipegcn_paper",
                 "planetoid_baselines", "sar_papers_gat", "sar_papers_sage"):
        assert {f"{stem}_full", f"{stem}_mini"} <= reproducing, stem


def test_gas_states_the_gas_authors_regime_without_a_table():
    cfg = composed("gas")
    assert not cfg.get("reproduces")
    assert_whole_regime("gas", cfg["regime"])
    assert any(t.startswith("followed:") for t in statements(cfg["regime"]["preprocessing"]))


def test_a_mini_preset_inherits_what_it_does_not_restate():
    full, mini = composed("planetoid_baselines_full")["regime"], composed("planetoid_baselines_mini")["regime"]
    assert mini["preprocessing"] == full["preprocessing"] and mini["runs"] != full["runs"]


def test_the_check_refuses_a_regime_missing_an_item_or_a_verdict():
    regime = dict(composed("gas")["regime"])
    check_regime(regime)
    for item in REGIME_ITEMS:
        partial = {k: v for k, v in regime.items() if k != item}
        with pytest.raises(UserError, match=f"missing: {item}"):
            check_regime(partial)
    with pytest.raises(UserError, match="unknown: seeds"):
        check_regime({**regime, "seeds": "followed: ten"})
    with pytest.raises(UserError, match="regime.runs must start with"):
        check_regime({**regime, "runs": "ten seeds, as the paper"})
    with pytest.raises(UserError, match="regime.stopping must start with"):
        check_regime({**regime, "stopping": ["followed: 200 epochs", "early stopping not used"]})
