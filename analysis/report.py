"""`report.md` for a folder of records: every table, every figure, the sections of the studies
whose records are there (analysis/studies/), and published numbers beside the measured ones where a
record matches one."""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import pandas as pd

from analysis import PROJECT_ROOT, figures, reference, studies
from analysis import records as rec
from analysis.markdown import fmt, fmt_peak, md_table

MIB = 2 ** 20


def _status(row) -> str:
    if row["status"] != "ok":
        return f"**failed** ({row['n_failed']}): {(row['error'] or '').splitlines()[0] if row['error'] else ''}"
    return "ok" + (f", {row['n_failed']} failed" if row["n_failed"] else "")


def runs_table(agg: pd.DataFrame, show_setting: bool = False) -> str:
    """One line per configuration (the aggregate with speedups), failed ones marked."""
    header = ["dataset", "model", *(["setting"] if show_setting else []), "method", "workers", "runs", "status",
              "epoch (s)", "vs single", "vs 1 worker", "peak PSS/rank (MiB)", "peak PSS, all ranks (MiB)",
              "train WS/rank (MiB)", "comm (MB/epoch)", "best val", "test"]
    rows = []
    for _, r in agg.iterrows():
        rows.append([r["dataset"], r["model"], *([r["setting"]] if show_setting else []), r["variant"], r["workers"],
                     r["n_ok"] + r["n_failed"], _status(r), fmt(r["epoch_time_s"], 4, r["epoch_time_s_std"]),
                     fmt(r["speedup_vs_single"], 2, suffix="x"), fmt(r["speedup_vs_1"], 2, suffix="x"),
                     fmt_peak(r["peak_mem_bytes"], r["peak_mem_kind"], 0, MIB, r["peak_mem_bytes_std"]),
                     fmt(r["peak_pss_sum_bytes"], 0, r["peak_pss_sum_bytes_std"], MIB),
                     fmt(r["train_mem_bytes"], 1, r["train_mem_bytes_std"], MIB),
                     fmt(r["comm_bytes_per_epoch"], 2, scale=1e6), fmt(r["best_val_acc"], 4, r["best_val_acc_std"]),
                     fmt(r["test_acc"], 4, r["test_acc_std"])])
    return md_table(header, rows)


def build(results_dir, out_dir=None, target_acc: float | None = None) -> Path:
    """Write `<out_dir>/report.md` and `<out_dir>/figures/*.png|pdf`; returns the report's path.
    The report is made in a hidden folder inside `out_dir` and moved into place once whole, so a
    write that fails (a full disk) leaves the folder as it was; the CLI says it in one line
    (`benchmarks.base.outputs.writing`, outside the report, which imports nothing from the runtime)."""
    results_dir = Path(results_dir)
    out_dir = Path(out_dir) if out_dir else results_dir
    records = rec.load(results_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".report-", dir=out_dir))
    try:
        head = [f"# Report: `{results_dir}`", "", _summary(records) + f"; written {time.strftime('%Y-%m-%d %H:%M')} "
                "by `python -m analysis report`.", ""]
        (stage / "report.md").write_text("\n".join(head + _body(records, stage, target_acc)))
        _move_into_place(stage, out_dir)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return out_dir / "report.md"


#: The file `publish` writes into a page's figure folder (`<page dir>/<page stem>/`): the mark by
#: which a later `publish` of that page knows the folder is its own to replace. A folder without it
#: (the records being published, anyone's notes) is never touched: `publish` refuses the page.
MARK = ".publication"
#: The folder of a page's own folder that holds the records the page was read from.
RECORDS = "records"


def page_in_the_way(page) -> str | None:
    """Why `publish` must refuse `page`, or None: its figure folder `<page dir>/<page stem>` exists
    and is not a previous publication of this page (a folder holding MARK)."""
    page = Path(page)
    folder = page.parent / page.stem
    if not (folder.exists() or folder.is_symlink()):
        return None
    if folder.is_dir() and not folder.is_symlink() and (folder / MARK).is_file():
        return None
    return (f"--publish {page} would put its figures in {folder}, which exists and is not a previous "
            f"publication of this page (it has no {MARK}); nothing was written: choose another page name, "
            f"or move {folder} away")


def publish(results_dir, page) -> Path:
    """Write a results page: `<page>` (markdown), its figures under `<page stem>/figures/`, the records it read
    under `<page stem>/records/` (copies: extending the study starts from them), and, for a
    study with a data table (`studies.TABLES`), `<page stem>.csv`. The page states the command that
    regenerates it, the sweep that made its records, their commits, machine and dates; nothing in it
    depends on when it was written, so regenerating from the same records gives the same text. Its
    sections are the studies' whose records are there, or the whole report for records of no study
    (the quickstart). Made in a hidden folder beside the page and moved into place once whole. The
    figure folder is marked (MARK) and replaces a previous publication's whole, so no stale figure
    survives; any other folder of that name is refused (`page_in_the_way`, FileExistsError) before
    anything is written, and nothing this function did not make is ever removed."""
    results_dir, page = Path(results_dir), Path(page)
    in_the_way = page_in_the_way(page)
    if in_the_way:
        raise FileExistsError(in_the_way)
    records = rec.load(results_dir)
    page.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".publish-", dir=page.parent))
    try:
        own = stage / page.stem
        named = sorted({r["config"].get("study") for r in records if r["config"].get("study") in studies.SECTIONS})
        body = studies.sections(records, own) if named else _body(records, own, None)
        text = "\n".join(_page_head(records, results_dir, page, named) + body)
        (stage / page.name).write_text(text.replace("](figures/", f"]({page.stem}/figures/"))
        for study in named:
            if study in studies.TABLES:
                studies.TABLES[study](studies.of(records, study)).to_csv(stage / f"{page.stem}.csv", index=False)
        (own / RECORDS).mkdir(parents=True)  # the records it read ship with the page (results/ is never tracked)
        for r in records:
            shutil.copy2(r["_path"], own / RECORDS)
        (own / MARK).write_text(f"The figures and records of {page.name}, written by `python -m analysis report "
                                "--publish`; replaced whole when that page is published again.\n")
        _swap_in(own, page, stage / f"{page.name}.previous")
        for path in sorted((q for q in stage.iterdir() if q.is_file()), key=lambda q: q.suffix == ".md"):
            os.replace(path, page.parent / path.name)  # the page last
    finally:
        shutil.rmtree(stage, ignore_errors=True)  # with the previous publication's figures, set aside in it
    return page


def _swap_in(new: Path, page: Path, aside: Path) -> None:
    """The page's folder (figures and records) replaced by `new`: the previous
    publication's renamed to `aside` (in the staging folder, removed with it), then `new` renamed
    in; if that fails the previous one goes back. Checked again here: a folder made since `publish`
    began is not the previous publication."""
    folder = page.parent / page.stem
    previous = folder.exists() or folder.is_symlink()
    if previous:
        in_the_way = page_in_the_way(page)
        if in_the_way:
            raise FileExistsError(in_the_way)
        os.rename(folder, aside)
    try:
        os.rename(new, folder)
    except OSError:
        if previous:
            os.rename(aside, folder)
        raise


def _summary(records: list[dict]) -> str:
    n_failed = sum(r["status"] != "ok" for r in records)
    env = records[0].get("env") or {}
    return (f"{len(records)} runs ({len(records) - n_failed} ok, {n_failed} failed); {env.get('cores', '?')} cores, "
            f"torch {env.get('torch', '?')}, {env.get('device', '?')}")


def _presets(folders: list[str]) -> list[str]:
    """The experiment presets (conf/experiment/) that write to any of `folders`: the sweep behind
    a folder of records (a record keeps its resolved config, not the preset's name)."""
    import yaml
    found = []
    for path in sorted((PROJECT_ROOT / "conf" / "experiment").glob("*.yaml")):
        if (yaml.safe_load(path.read_text()) or {}).get("results_dir") in folders:
            found.append(path.stem)
    return found


def _page_head(records: list[dict], results_dir: Path, page: Path, named: list[str]) -> list[str]:
    """What a results page says of where its numbers come from, all read from the records."""
    def values(get):
        return sorted({str(v) for v in map(get, records) if v})
    env = lambda key: (lambda r: (r.get("env") or {}).get(key))  # noqa: E731
    commits = values(env("git_commit"))
    dates = values(lambda r: (r.get("finished_at") or r.get("started_at") or "")[:10])
    presets = _presets(values(lambda r: r["config"].get("results_dir")))
    sweep = (" && ".join(f"python -m benchmarks.commands.sweep experiment={p}" for p in presets)
             if presets else f"python -m benchmarks.commands.sweep ... results_dir={results_dir}")
    title = ", ".join(named) if named else page.stem
    return [f"# Results: {title}", "",
            "Generated from records; do not edit by hand. To regenerate it, run the sweep, then publish:", "",
            "```bash", sweep, f"python -m analysis report {results_dir} --publish {page}", "```", "",
            f"- Records: {_summary(records)}.",
            f"- Machine: {', '.join(values(env('platform'))) or '?'}; "
            f"python {', '.join(values(env('python'))) or '?'}.",
            "- Code: commit "
            f"{', '.join(c[:10] + ('-dirty' if c.endswith('-dirty') else '') for c in commits) or 'unknown'}"
            + (" (`-dirty`: the working tree had uncommitted changes)."
               if any(c.endswith("-dirty") for c in commits) else "."),
            f"- Dates: {dates[0] + ' to ' + dates[-1] if len(dates) > 1 else (dates or ['unknown'])[0]}.", ""]


def _move_into_place(stage: Path, out_dir: Path) -> None:
    """Every file made in `stage`, renamed to the same place under `out_dir` (same file system: no
    copy, no space needed), figures first and report.md last; a figures folder not there yet moves whole."""
    for path in sorted(stage.rglob("*"), key=lambda q: (q.name == "report.md", len(q.parts))):
        if not path.exists() or path.is_dir() and (out_dir / path.relative_to(stage)).exists():
            continue  # moved with its folder, or a folder merged file by file
        target = out_dir / path.relative_to(stage)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, target)


def _body(records: list[dict], out_dir: Path, target_acc: float | None) -> list[str]:
    """The report's sections (everything under its title), its figures written under `out_dir`."""
    runs = rec.runs(records)
    settings = rec.settings_described(runs)
    runs.attrs["settings"] = settings
    agg = rec.speedup(rec.aggregate(runs))
    agg.attrs["settings"] = settings
    hist = rec.history(records)
    tta = rec.time_to_accuracy(hist, runs, target_acc)
    comm = rec.comm_by_category(runs)
    figs = figures.all_figures(records, out_dir / "figures")

    parts = [f"{len(agg)} configurations.", ""]
    # Settings are named only where one dataset and model were run in more than one way.
    show_setting = bool(len(runs)) and runs.groupby(["dataset", "model"])["setting"].nunique().max() > 1
    if show_setting:
        parts += ["Settings (configuration keys that differ between groups of runs):", "",
                  md_table(["setting", "differs in"], [[s, d] for s, d in settings.items()]), ""]

    parts += ["## Runs", "",
              "Mean ± standard deviation over seeds. Epoch time: median over epochs after warm-up, slowest "
              "rank. Memory: the largest rank's peak PSS (pages shared between ranks, such as a memory-mapped "
              "graph or shared memory, split between them; RSS, marked, in records from before PSS) and the sum "
              "of every rank's peak PSS (one machine's total). Communication: training bytes sent per epoch, "
              "all ranks. "
              "Speedups divide epoch times.", ""]
    parts += [runs_table(agg, show_setting), ""]
    failed = runs[runs["status"] != "ok"]
    if len(failed):
        parts += ["### Failed runs", "", md_table(["run", "error"], [[f"`{r['run']}`", r["error"] or ""]
                                                                     for _, r in failed.iterrows()]), ""]

    parts += ["## Speedup", "", "Epoch-time speedup over `single` (the whole graph in one process; over the same "
              "method at one worker where there is no `single`), one line per method against workers; the dashed "
              "line is linear speedup. What to look for: a line that rises with workers (the split work outweighs "
              "the exchange) or falls (communication and per-rank overheads win). With more ranks than cores, or a "
              "graph of a few thousand nodes, every distributed line sits below 1: that is this machine, not the "
              "method; the cost model (`python -m analysis advise`) carries the counts to a cluster.", "",
              _img(figs, "speedup_vs_workers"), ""]

    mem = rec.memory_scaling(agg, "train_mem_bytes")
    parts += ["## Memory per rank", "",
              "Peak memory (PSS, RSS where marked) includes the interpreter and torch; the training working set "
              "(peak during training minus the resident memory at its start) is what a method changes. Ideal: "
              "the reference (same method at 1 worker, else `single`, else fewest workers) divided by P. What to "
              "look for in the figure: the right panel's lines against the dashed 1/P line. A method whose working "
              "set falls with P is the one that lets a graph too large for one device fit; the peak (left) "
              "includes torch and the graph, which do not shrink.", "",
              md_table(["dataset", "model", "method", "workers", "train WS/rank (MiB)", "ideal 1/P (MiB)", "vs ideal"],
                       [[r["dataset"], r["model"], r["variant"], r["workers"], fmt(r["memory"], 1, scale=MIB),
                         fmt(r["ideal"], 1, scale=MIB), fmt(r["vs_ideal"], 2, suffix="x")]
                        for _, r in mem.iterrows()]), "", _img(figs, "memory_vs_workers"), ""]

    parts += ["## Accuracy against time", "",
              "Training time (evaluation excluded) until the validation accuracy first reaches the target "
              "(" + ("given: " + str(target_acc) if target_acc is not None
                     else "95 % of the best any run reached on that dataset and model") + "); "
              "– where it never did. The figure: validation accuracy against epoch (exact methods share one curve: "
              "they compute the same model) and against training time (what a method's epoch costs); dashed lines "
              "are the fewer-worker runs. Look for a curve that ends below the exact one (the approximation costs "
              "accuracy) or reaches it later in time.", "",
              md_table(["dataset", "model", "method", "workers", "target", "time to target (s)", "epochs", "reached"],
                       [[k[0], k[1], k[2], k[3], fmt(t["target"].iloc[0], 3),
                         fmt(t["time_to_target_s"].mean(), 3, t["time_to_target_s"].std()),
                         fmt(t["epoch_to_target"].mean(), 0), f"{int(t['time_to_target_s'].count())}/{len(t)}"]
                        for k, t in tta.groupby(rec.KEYS, dropna=False)]), "", _img(figs, "accuracy_vs_time"), ""]

    parts += ["## Communication", "", "Training bytes per epoch (all ranks) by category; evaluation and setup "
              "traffic are not counted. The figure: bytes per epoch against workers (left) and their split by "
              "category (right: halo rows forward and gradients backward, the gradient all-reduce, each method's "
              "own). Look at which category dominates: a method that cuts halo bytes gains only where halo bytes "
              "are most of the traffic.", ""]
    if len(comm):
        pivot = comm.pivot_table(index=["dataset", "model", "variant", "workers"], columns="category",
                                 values="bytes_per_epoch", aggfunc="sum", fill_value=0)
        parts += [md_table(["dataset", "model", "method", "workers", *[f"{c} (MB)" for c in pivot.columns]],
                           [[*k, *[fmt(v, 3, scale=1e6) for v in vals]] for k, vals in zip(pivot.index, pivot.values)]),
                  ""]
    else:
        parts += ["No run sent training traffic.", ""]
    parts += [_img(figs, "comm_vs_workers"), "", "## Accuracy against communication", "",
              "One point per configuration: test accuracy of the reported model (at the best validation epoch, or "
              "where the run's stopping rule says: `stopping`) against training bytes per "
              "epoch (log; a run that sends nothing sits at the left edge, marked 0 B). The dashed line is the exact "
              "methods' mean accuracy, the reference: exact methods lie on it at the bytes of an exact exchange. "
              "Look for points left of the exact ones that stay on the line (fewer bytes, no accuracy lost) and "
              "for points below it (what the saving costs). One seed per point in the quickstart: a gap of a point "
              "or two is within seed noise (the findings study, `experiment=findings`, pairs 5 seeds).", "",
              _img(figs, "accuracy_vs_comm"), "", "## Memory against time", "",
              "One point per configuration: lower left is faster and smaller. Look for the method that is smallest "
              "at an acceptable time; the P= label says how many ranks bought it.", "",
              _img(figs, "memory_time_scatter"), ""]

    parts += studies.sections(records, out_dir)  # the sections of the studies whose records are here
    parts += _paper_section(agg, runs)
    return parts


def _img(figs: dict, name: str) -> str:
    png = figs[name][0]
    return f"![{name.replace('_', ' ')}](figures/{png.name}) ([PDF](figures/{png.stem}.pdf))"


def _value(x: float, unit: str, failed: bool = False) -> str:
    if failed:
        return "**failed**"
    if x != x:
        return "–"
    sign = "+" if unit == "pp" and x > 0 else ""
    return f"{sign}{x:.3g} {unit}"


def _paper_section(agg: pd.DataFrame, runs: pd.DataFrame) -> list[str]:
    cmp = reference.compare(agg, runs)
    parts = ["## Published numbers", ""]
    if not len(cmp):
        named = sorted({t for t in runs["reproduces"] if isinstance(t, str) and t})
        if not named:
            return parts + ["No record here matches a published figure (`results/reference/papers.csv`): the runs' "
                            "datasets and model families are not in it and no preset named a paper table "
                            "(`reproduces`). The paper presets (`experiment=*_full`, `*_mini`) produce records that "
                            "do.", ""]
        return parts + [reference.why_unmatched(table, sorted(set(runs["dataset"]))) for table in named] + [""]
    parts += ["Paper beside measured, matched on dataset, model family and the metric's unit (per epoch, per round, "
              "per run). *full*: every key the published row records (its `config` in papers.csv, workers) equals "
              "the run's; *unconfirmed*: nothing recorded differs but the source leaves core keys unknown (listed); "
              "*scaled-down*: the keys that differ, `key measured≠paper` (`?`: the run does not record it; worker "
              "counts are paired by rank); *shape*: the run's dataset stands in for the table's (not in it), so "
              "each method is set relative to the table's reference method, accuracy as a difference in points "
              "(pp), time, memory and bytes as a ratio (x), and absolute values are not compared; *not comparable*: "
              "the units differ (MB per round against bytes per epoch). Certainty is the source's. *Verdict* "
              "(`reference.verdict`): for a ratio or a difference, *agrees* where the measured effect has the "
              "paper's sign and at least half its size, *same direction, smaller* below half, *disagrees* where "
              "the sign differs or no effect shows; an absolute accuracy agrees within 1 point; *not a finding "
              "here*: a time measured with more ranks than cores (time-slicing, blanked as in the runs table), "
              "an absolute time or memory, units that differ, or nothing measured.", ""]
    rows = []
    for _, r in cmp.iterrows():
        paper = _value(r["paper"], r["unit"]) if r["paper"] == r["paper"] else "– (no value: OOM)"
        if r["relative_to"]:
            paper += f" vs {r['relative_to']}"
        measured = "–" if r["time_sliced"] else _value(r["measured"], r["unit"], r["status"] != "ok")
        kind = r["reproduction"] + (f": {r['differs']}" if r["differs"] else "")
        if r["unknown"]:
            kind += f"; source does not state: {r['unknown']}"
        rows.append([r["table"] or "–", r["paper_dataset"], r["paper_model"], r["paper_method"],
                     r["paper_workers"] or "–", f"{r['metric']} (per {r['per']})", paper, measured,
                     f"{r['variant']} P={r['workers']} on {r['dataset']}", r["measured_as"], r["certainty_text"], kind,
                     f"{r['verdict']}: {r['why']}"])
    parts += [md_table(["table", "dataset", "model", "method", "workers", "metric", "paper", "measured",
                        "measured run", "measured as", "certainty", "reproduction", "verdict"], rows), ""]
    uncertain = cmp[cmp["certainty"].isin(["figure-estimate", "recalled"])]
    if len(uncertain):
        kinds = uncertain["certainty_text"].value_counts()
        parts += ["Uncertain published values here: " + ", ".join(f"{n} {text}" for text, n in kinds.items())
                  + ". Read them as approximate.", ""]
    sources = cmp[cmp["config_source"] != ""].drop_duplicates(["source", "config_source"])
    if len(sources):
        parts += ["Where each published row's configuration comes from (papers.csv `config_source`; keys it "
                  "does not state are unknown, never assumed):", ""]
        parts += [f"- {r['source']}, {r['paper_dataset']} {r['paper_model']}: {r['config_source']}"
                  for _, r in sources.iterrows()] + [""]
    return parts
