"""Study `lr_choice`: per family, the rate whose runs reach the best mean validation accuracy is chosen (the
lower on a tie), test accuracy never read; the page ends with the mapping a comparison preset copies."""
from __future__ import annotations

from pathlib import Path

import pytest

from analysis.studies import lr_choice
from benchmarks.run.methods_table import about
from tests.analysis.handmade import record

pytestmark = pytest.mark.fast

#: validation accuracy of the reported model per (method, lr), over two seeds; test accuracy runs the other way
VAL = {("full_halo", 0.003): (0.78, 0.80), ("full_halo", 0.01): (0.80, 0.81), ("full_halo", 0.03): (0.79, 0.80),
       ("psgd_pa", 0.003): (0.74, 0.75), ("psgd_pa", 0.01): (0.76, 0.76), ("psgd_pa", 0.03): (0.77, 0.78),
       ("llcg", 0.003): (0.75, 0.75), ("llcg", 0.01): (0.77, 0.76), ("llcg", 0.03): (0.76, 0.76),
       ("digest", 0.003): (0.79, 0.79), ("digest", 0.01): (0.79, 0.79), ("digest", 0.03): (0.78, 0.78)}


def _records() -> list[dict]:
    out = []
    for (method, lr), vals in VAL.items():
        for seed, val in enumerate(vals):
            r = record(method, seed=seed, dataset="cora", extra={"study": "lr_choice"}, epochs=3 if lr == 0.03 else 5,
                       summary={"val_acc_selected": val, "test_acc_selected": 1.0 - val})
            r["config"]["lr"] = lr
            r["about"] = about(method)
            out.append(r)
    return out


def test_each_family_takes_its_best_mean_validation_rate_the_lower_on_a_tie():
    t = lr_choice.choices(_records())
    assert lr_choice.lr_by_family(t) == {("cora", "sage"): {"FullGraphMethod": 0.01, "LocalRounds": 0.03,
                                                            "PartitionParallelMethod": 0.003}}
    local = t[(t["family"] == "LocalRounds") & (t["lr"] == 0.03)].iloc[0]
    assert local["members"] == "llcg, psgd_pa" and local["runs"] == 4
    assert local["val_mean"] == pytest.approx(100 * (0.77 + 0.78 + 0.76 + 0.76) / 4)
    assert local["capped"] == 4  # 3 epochs run of a cap of 3: the cap stopped them


def test_the_page_states_the_rule_and_ends_with_the_mapping_to_copy():
    text = "\n".join(lr_choice.section(_records(), Path("/tmp/lr-choice-test")))
    assert "test accuracy is not read" in text and "seeds [0, 1]" in text
    assert text.rstrip().endswith("cora · sage:\n\n```yaml\n  lr_by_family:\n    FullGraphMethod: 0.01\n"
                                  "    LocalRounds: 0.03\n"
                                  "    PartitionParallelMethod: 0.003\n```")


def test_with_two_graphs_each_familys_lead_is_named_with_its_graph():
    other = _records()
    for r in other:
        r["dataset"] = "cora-full"
    text = "\n".join(lr_choice.section(_records() + other, Path("/tmp/lr-choice-test")))
    leads = next(line for line in text.splitlines() if line.startswith("The chosen rate's lead over the next: "))
    assert leads.count("cora · sage: FullGraphMethod ") == 1
    assert leads.count("; cora-full · sage: FullGraphMethod ") == 1
    assert "cora · sage:\n\n```yaml" in text and "cora-full · sage:\n\n```yaml" in text
