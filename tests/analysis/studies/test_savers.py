"""Study `savers` on hand-made records with known answers: which table a run lands in, the ratios
to plain full_halo, the goals' verdicts, variants not run or failed, and the figures."""
from __future__ import annotations

import pytest

from analysis import records, studies
from analysis.studies import savers
from tests.analysis.handmade import record, write

pytestmark = pytest.mark.fast

GIB = 2 ** 30
CKPT, BF16 = {"memory.checkpoint": "layer"}, {"precision": "bf16"}
BIG = {"study": "savers", "dataset": {"name": "synthetic", "nodes": 200000}}  # experiment=savers's graph


def memory_run(method, model, train_gib, epoch_time, by_cat, savers_=None, status="ok"):
    return record(method, 4, train_mem=train_gib * GIB, epoch_time=epoch_time, by_cat=by_cat, model=model,
                  status=status, savers=savers_, extra=BIG)


def quantize_run(variant, dataset, seed, val, by_cat, status="ok"):
    method, *rest = variant.split()
    saved = dict(word.split("=") for word in rest)
    if "comm.quantize_grads" in saved:
        saved["comm.quantize_grads"] = True
    extra = {"study": "savers", "partitioner": "metis"}
    if dataset == "synthetic":
        extra.update(dataset={"name": "synthetic", "nodes": 10000}, partitioner="random")
    return record(method, 4, seed=seed, val=val, by_cat=by_cat, dataset=dataset, savers=saved, status=status,
                  extra=extra)


HALO = {"halo_fwd": 3000, "halo_bwd": 3000}  # 3 epochs: 2000 bytes per epoch


@pytest.fixture
def folder(tmp_path):
    return write(tmp_path / "r", [
        # sage: checkpointing meets its goal (0.375x memory at 1.4x time); SAR loses to it on both
        memory_run("full_halo", "sage", 8, 1.0, HALO),
        memory_run("full_halo", "sage", 3, 1.4, {**HALO, "halo_fwd_recompute": 1500}, CKPT),
        memory_run("full_halo", "sage", 6, 0.9, {"halo_fwd": 1500, "halo_bwd": 1500}, BF16),
        memory_run("full_halo", "sage", 2, 1.2, {"halo_fwd": 1500, "halo_bwd": 1500}, {**CKPT, **BF16}),
        memory_run("sar", "sage", 4, 2.1, HALO),
        memory_run("sar", "sage", 0, 0, {}, CKPT, status="failed"),
        memory_run("sar", "sage", 3.5, 1.9, HALO, BF16),  # sar +ckpt +bf16: not run
        # gat: checkpointing saves too little (0.625x); SAR beats it on both
        memory_run("full_halo", "gat", 8, 1.0, HALO),
        memory_run("full_halo", "gat", 5, 1.2, HALO, CKPT),
        memory_run("sar", "gat", 2, 1.0, HALO),
        # cora: full_halo at 84.0 (mean of 89 and 79), 2000 halo bytes and 200 gradient bytes per epoch
        *(quantize_run("full_halo", "cora", s, (0.5, 0.6, v), {**HALO, "grad_allreduce": 600})
          for s, v in ((0, 0.9), (1, 0.8))),
        *(quantize_run("full_halo comm.quantize=bf16", "cora", s, (0.5, 0.6, v), {"halo_fwd": 1500, "halo_bwd": 1500})
          for s, v in ((0, 0.896), (1, 0.796))),  # 0.4 pt below at 0.5x the bytes
        *(quantize_run("full_halo comm.quantize=int8", "cora", s, (0.5, 0.6, v), {"halo_fwd": 800, "halo_bwd": 800})
          for s, v in ((0, 0.89), (1, 0.79))),  # 1 pt below at 0.267x
        quantize_run("full_halo comm.quantize=int8 comm.quantize_grads=True", "cora", 0, (0.5, 0.8, 0.9),
                     {"halo_fwd": 800, "halo_bwd": 800, "grad_allreduce": 450}),
        *(quantize_run("adaqp", "cora", s, (0.5, 0.6, v), {"halo_fwd": 600, "halo_bwd": 600, "halo_scales": 300})
          for s, v in ((0, 0.9), (1, 0.8))),  # level at 0.25x, its own halo category counted
        quantize_run("full_halo", "citeseer", 0, (0.5,), {}, status="failed"),
        quantize_run("full_halo comm.quantize=int8", "citeseer", 0, (0.5, 0.6, 0.7), HALO),
        quantize_run("full_halo", "synthetic", 0, (0.5, 0.6, 0.7), HALO),  # the 10k graph: the other table
    ])


def test_runs_split_by_graph_and_the_memory_table_has_ratios_to_plain_full_halo(folder):
    memory_runs, quantize_runs = savers.split(records.load(folder))
    assert set(memory_runs["dataset"]) == {"synthetic"} and len(memory_runs) == 10
    assert sorted(set(quantize_runs["dataset"])) == ["citeseer", "cora", "synthetic"]
    t = savers.memory_table(memory_runs)
    by = {(r["model"], r["variant"]): r for r in t.to_dict("records")}
    ckpt = by[("sage", "full_halo memory.checkpoint=layer")]
    assert (ckpt["mem_ratio"], ckpt["time_ratio"]) == (pytest.approx(3 / 8), pytest.approx(1.4))
    assert ckpt["halo_bytes_per_epoch"] == 2000 and ckpt["recompute_bytes_per_epoch"] == 500
    assert by[("sage", "sar memory.checkpoint=layer")]["status"] == "failed"
    assert by[("sage", "sar memory.checkpoint=layer precision=bf16")]["status"] == "not run"
    assert len(t[t["model"] == "gat"]) == 8  # every variant of the preset has a row


def test_memory_goals_and_the_sar_sentence_come_from_the_numbers(folder):
    t = savers.memory_table(savers.split(records.load(folder))[0])
    lines = "\n".join(savers.memory_goals(t))
    assert "- synthetic gat P=4: checkpointed full_halo: working set 0.62x (goal <= 0.5: NOT met)" in lines
    # The hand-made records ran 4 ranks on 2 cores: time goals are shown, not judged.
    assert ("- synthetic sage P=4: checkpointed full_halo: working set 0.38x (goal <= 0.5: met); "
            "epoch time 1.40x (not judged: 4 ranks on 2 cores)") in lines
    assert ("- synthetic sage P=4: SAR does not beat checkpointed full_halo in memory (1.33x its working set); "
            "its epoch time 1.50x (not judged: 4 ranks on 2 cores).") in lines
    # With a core per rank they are judged.
    t["cores"] = 8
    lines = "\n".join(savers.memory_goals(t))
    assert "epoch time 1.40x (goal <= 1.5: met)" in lines
    assert ("- synthetic sage P=4: SAR does not beat checkpointed full_halo in memory (1.33x its working set); "
            "does not beat it in time (1.50x its epoch time).") in lines
    assert "- synthetic gat P=4: SAR beats checkpointed full_halo in memory (0.40x its working set); beats" in lines


def test_quantize_table_costs_bytes_and_goals_per_dataset(folder):
    t = savers.quantize_table(savers.split(records.load(folder))[1])
    by = {(r["dataset"], r["variant"]): r for r in t.to_dict("records")}
    bf16 = by[("cora", "full_halo comm.quantize=bf16")]
    assert bf16["acc_gap_pt"] == pytest.approx(0.4) and bf16["bytes_ratio"] == pytest.approx(0.5)
    assert by[("cora", "adaqp")]["bytes_ratio"] == pytest.approx(0.25)  # halo_scales counted
    assert by[("cora", "full_halo comm.quantize=int8 comm.quantize_grads=True")]["grad_bytes_per_epoch"] == 150
    assert by[("cora", "full_halo")]["grad_bytes_per_epoch"] == 200
    assert by[("cora", "full_halo comm.quantize=int4")]["status"] == "not run"
    assert by[("cora", "full_halo")]["test_acc_std"] == pytest.approx(0.0707, abs=1e-4)
    lines = "\n".join(savers.quantize_goals(t))
    # judged on the paired interval over seeds (here both seeds move alike: the SD at its floor, paired.SD_FLOOR)
    assert ("- cora sage P=4 full_halo comm.quantize=bf16: effect -0.40 [-0.77, -0.03] (2) pt (goal >= -0.5 on the "
            "interval: unresolved (the interval spans -0.5))") in lines
    assert ("- cora sage P=4 full_halo comm.quantize=int8: effect -1.00 [-1.37, -0.63] (2) pt (goal >= -0.5 on the "
            "interval: NOT met); halo bytes 0.267x (goal <= 0.3: met)") in lines
    assert ("- cora sage P=4 adaqp: effect +0.00 [-0.37, +0.37] (2, within noise) pt (goal >= -0.5 on the interval: "
            "met); halo bytes 0.250x (goal <= 0.35: met)") in lines
    assert "- citeseer sage P=4: plain full_halo (fp32) failed: goals not judged" in lines
    assert "int8 comm.quantize_grads=True" not in lines  # no goal of its own: its gradient bytes are in the table
    assert "- synthetic sage P=4 adaqp: not run" in lines


def test_the_section_states_both_tables_and_writes_both_figures(folder, tmp_path):
    out = tmp_path / "out"
    text = "\n".join(studies.sections(records.load(folder), out))
    assert "## Study: savers — memory and time" in text and "## Study: savers — quantised messages" in text
    assert "time measured with 4 ranks on 2 cores: ratios only" in text
    assert "| synthetic | sage | 4 | sar memory.checkpoint=layer precision=bf16 | 0 | not run |" in text
    assert "| cora | sage | 4 | full_halo | 2 | ok | 84.0 ± 7.1 | 0.00 | – | 0.002 | 1.000 | 0.000 |" in text
    for name in ("working_set_vs_epoch_time", "accuracy_cost_vs_bytes_ratio"):
        assert (out / "figures" / "savers" / f"{name}.png").stat().st_size > 1000
        assert f"(figures/savers/{name}.png)" in text


def test_the_expected_variants_are_spelt_as_the_runtime_names_them():
    from benchmarks.run.record import run_variant

    def named(method="full_halo", checkpoint="none", precision="fp32", quantize="none", grads=False):
        return run_variant({"method": {"name": method}, "memory": {"checkpoint": checkpoint}, "precision": precision,
                            "comm": {"quantize": quantize, "quantize_grads": grads}}, {})

    assert set(savers.MEMORY_VARIANTS) == {named(m, c, p) for m in ("full_halo", "sar") for c in ("none", "layer")
                                           for p in ("fp32", "bf16")}
    assert savers.QUANTIZE_VARIANTS[:-1] == [named(), *(named(quantize=q) for q in ("bf16", "int8", "int4", "int2")),
                                             named(quantize="int8", grads=True)]


def test_a_folder_where_every_run_failed_still_gets_both_sections(tmp_path):
    folder = write(tmp_path / "f", [memory_run("full_halo", "sage", 0, 0, {}, CKPT, status="failed"),
                                    quantize_run("adaqp", "cora", 0, (), {}, status="failed")])
    text = "\n".join(studies.sections(records.load(folder), tmp_path / "out"))
    assert "- synthetic sage P=4: plain full_halo (fp32) not run: no ratios" in text
    assert "- cora sage P=4: plain full_halo (fp32) not run: goals not judged" in text
    assert "| cora | sage | 4 | adaqp | 0 | **failed**: RuntimeError: boom |" in text
    assert (tmp_path / "out/figures/savers/working_set_vs_epoch_time.png").exists()
