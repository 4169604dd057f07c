"""`python -m benchmarks.commands.sweep experiment=<preset> [key=value | key=a,b ...] [--dry-run]`: run a
preset's sweep, each run in its own process (so each run's memory is its own), resuming. This is
the one sweep engine: every study's runs come from its preset through here.

What a preset sweeps (all optional; docs/analysis.md has an example of each):

- `hydra.sweeper.params`: axes, crossed (the same ones `python -m benchmarks -m` uses). Comma lists
  on this command line add axes or replace the preset's. `method: ${all_methods:}` sweeps every
  registered method, so plugins added later are picked up with no change.
- `sweep.variants`: a list of override lists; each run is one point of the axes plus one variant
  (a union, not a product: `[[method=sar, method.mode=sa], [method=digest, method.sync_every=1]]`).
  A variant that sets a key the point (or the command line) sets to another value is dropped, so
  `method=sar` on the command line keeps only sar's variants.
- `sweep.where`: `[{if: {key: value or [values]}, add: [overrides]}]`: extra overrides for the runs
  whose overrides match (a larger graph for `dataset: synthetic`); later entries win.
- `sweep.skip`: `[{key: value or [values]}]`: runs that match one entry are not run.
- `sweep.minutes`: how long the whole sweep took on the machine the preset was timed on, which the
  sweep's first line states before anything runs (the time left that each run's line gives follows
  this machine).
- `sweep.controls: true`: every run's exact control (`config.control_config`: the approximation
  switched off, the same seed, partition, model and layer 0) is run too, right after it, unless the
  sweep has it already, so the report can pair each approximation with its control seed by seed.
- `sweep.lr_by_family`: `{<family>: <lr>}` (a family as `python -m benchmarks --methods` names it:
  `FullGraphMethod`, `MiniBatchMethod`, ...): each run, its exact control included, trains at its own
  method's family's learning rate (chosen on validation: experiment=lr_choice), so no method is
  compared at another family's; a family not named keeps the preset's `lr`, and a sweep whose axes or
  command line name `lr` runs the rates they name. `lr` is an axis of a
  record (`record.AXES`), so a method and its control at their families' rates still pair by seed.
- `sweep.bisect`: a strategy instead of one run per point: for each run, the largest value of the
  numeric `key` whose record is `ok` and whose `field` (`summary.<name>`, a number of the record's
  summary) is `at_most` (or `at_least`) a bound. It probes `start`, steps by `factor` (> 1) until it
  has a value that meets the bound and one that does not, then bisects until they are within
  `tolerance` (relative). The spec is checked (`Bisect`) before the first probe runs.

Overrides on this command line win over everything the preset adds. Every run's configuration is
composed and checked (`runner.plan`: no data is loaded) before the first run starts, so a bad value
stops the sweep in one line naming the run. A run whose `ok` record exists is skipped
(`resume=false` reruns it); a failed run is recorded and the sweep goes on; a method the preset
names but this checkout does not have (a paper table's method not written yet) is skipped with a
message. Each run's record is found at `record.record_path` of its configuration, never by reading
the run's output, and counts only if the run wrote it (`run_one`); a run that died without one gets a
failed record from the sweep. Each run's line says how many runs failed so far and, once one has run, the time
left (`[7/40] method=sar workers=2 · 1 failed so far · ~3 min left`: benchmarks/base/progress.py).
`--dry-run` prints the command of each run still missing (a bisection prints its first probe), for
`torchrun` or a cluster scheduler.
"""
from __future__ import annotations

import functools
import itertools
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import MISSING, dataclass
from pathlib import Path
from typing import NamedTuple, Optional

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from benchmarks.commands.composition import COMPOSED, check_composes, composition_error, config_of
from benchmarks.base.registry import CONF, check_overrides, method_names
from benchmarks.base.errors import Stopped, UserError, stop_on_signals
from benchmarks.base.options import Options, option, validate
from benchmarks.base.progress import duration, progress_line, time_left
from benchmarks.run.record import SUMMARY_FIELDS


@dataclass(frozen=True)
class Bisect(Options):
    """A preset's `sweep.bisect`: the largest value of `key` whose record meets a bound (benchmarks/commands/sweep.py's
    docstring says how the probes proceed)."""

    reserved = ()
    key: str = option(MISSING, "the numeric key bisected, e.g. dataset.nodes")
    start: int = option(MISSING, "the first value probed", ge=1)
    field: str = option(MISSING, "`summary.<name>`: the record's number held to the bound")
    at_most: Optional[float] = option(None, "the bound the field must not exceed")
    at_least: Optional[float] = option(None, "the bound the field must reach")
    factor: float = option(2.0, "the step between probes until the bound is bracketed", gt=1)
    tolerance: float = option(0.1, "the bracket's width at the end, relative to its lower value", gt=0)

    @property
    def bound(self) -> str:
        """The condition a probe's field must meet, in words: `<= 2147483648`."""
        return f"<= {self.at_most}" if self.at_most is not None else f">= {self.at_least}"

    def holds(self, value: float) -> bool:
        return value <= self.at_most if self.at_most is not None else value >= self.at_least

    def check(self, run) -> None:
        if (self.at_most is None) == (self.at_least is None):
            raise UserError("sweep.bisect needs one bound: sweep.bisect.at_most or sweep.bisect.at_least")
        section, _, name = self.field.partition(".")
        if section != "summary" or name not in SUMMARY_FIELDS:
            raise UserError(f"sweep.bisect.field={self.field} is not a number of a record's summary; choose one of: "
                            f"{', '.join('summary.' + f for f in SUMMARY_FIELDS)}")


def _values(override) -> list[str]:
    """A sweep's values (`a,b,c`), or the one value of a plain `key=value`."""
    if override.is_sweep_override():
        return [str(v) for v in override.sweep_string_iterator()]
    return [override.input_line.split("=", 1)[1]]


def _key(override: str) -> str:
    return override.split("=", 1)[0]


def _text(value) -> str:
    """A YAML value as it is written in an override (`true`, not Python's `True`)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _merge(*lists: list[str]) -> list[str]:
    """Override lists joined; a later value of a key replaces an earlier one, in place."""
    out: dict[str, str] = {}
    for override in itertools.chain(*lists):
        out[_key(override)] = override
    return list(out.values())


def _matches(values: dict[str, str], condition: dict) -> bool:
    """Whether the run's overrides give every key of the condition one of its values."""
    for key, wanted in condition.items():
        wanted = wanted if isinstance(wanted, list) else [wanted]
        if values.get(key) not in {_text(w) for w in wanted}:
            return False
    return True


def _preset(fixed: list[str]):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=fixed, return_hydra_config=True)
    params = cfg.hydra.sweeper.params
    params = OmegaConf.to_container(params, resolve=True) if params is not None else {}
    sweep = OmegaConf.to_container(cfg.sweep, resolve=True) if cfg.get("sweep") is not None else {}
    return cfg, params, sweep


def _axes(parsed: list, params: dict) -> dict[str, list[str]]:
    """The sweep's axes and their values: the preset's `hydra.sweeper.params`, the command line's parsed
    overrides winning (its comma lists are axes; its plain values fix a key the preset sweeps)."""
    axes = {o.key_or_group: _values(o) for o in OverridesParser.create().parse_overrides(
        [f"{k}={v}" for k, v in params.items()])}
    for o in parsed:
        axes.pop(o.key_or_group, None)
        if o.is_sweep_override():
            axes[o.key_or_group] = _values(o)
    return axes


@functools.lru_cache(maxsize=None)  # per method, not per run: resolving a method reads every alias YAML
def _single_process(method: str) -> bool:
    from benchmarks.run.method import method_class

    return method_class(method).single_process


def _one_run_for_every_count(job: list[str], method: str) -> list[str]:
    """`job` without its `workers` where `method` runs in one process: it ignores `workers`, so a sweep over
    counts (or a control beside runs at several counts) is one run of it, not one per count."""
    return [o for o in job if _key(o) != "workers"] if _single_process(method) else job


def expand(argv: list[str]) -> tuple[list[list[str]], list[str]]:
    """The runs (override lists) of a sweep, and the methods it names that do not exist here."""
    parsed = OverridesParser.create().parse_overrides(argv)
    fixed = [o.input_line for o in parsed if not o.is_sweep_override()]
    cfg, params, sweep = _preset(fixed)
    axes = _axes(parsed, params)
    variants = [list(v) for v in sweep.get("variants") or [[]]]
    available = method_names()
    runs, missing, seen = [], [], set()
    for coordinates, variant in itertools.product(itertools.product(*axes.values()), variants):
        point = dict(zip(axes, coordinates)) | {_key(o): o.split("=", 1)[1] for o in fixed}
        chosen = {_key(o): o.split("=", 1)[1] for o in variant}
        if any(point.get(k, v) != v for k, v in chosen.items()):
            continue  # the variant contradicts this point
        values = point | chosen
        if any(_matches(values, s) for s in sweep.get("skip") or []):
            continue
        method = values.get("method", cfg.method.name)
        if method not in available:
            missing.append(method)
            continue
        job = [f"{k}={values[k]}" for k in axes] + variant
        for rule in sweep.get("where") or []:
            if _matches(values, rule["if"]):
                job = _merge(job, rule["add"])
        if "lr" not in axes and not any(_key(o) == "lr" for o in job):  # an lr axis, variant or rule wins
            job = _merge(job, family_lr(method, sweep.get("lr_by_family")))
        # the command line last: it wins (but a one-process run takes no `workers`, as its control does not)
        overrides = _one_run_for_every_count(_merge(job, fixed), method)
        if tuple(overrides) not in seen:
            seen.add(tuple(overrides))
            runs.append(overrides)
    return runs, sorted(set(missing))


def family_lr(method: str, table: dict | None) -> list[str]:
    """`[lr=<value>]`: the learning rate `sweep.lr_by_family` gives `method`'s family ([] where it names
    none). A family the table names that no method has is refused: a misspelt one would pass silently."""
    if not table:
        return []
    from benchmarks.families import names
    from benchmarks.run.method import method_class
    from benchmarks.run.methods_table import family

    unknown = sorted(set(table) - set(names()))
    if unknown:
        raise UserError(f"sweep.lr_by_family names {', '.join(unknown)}, not a family; the families: "
                        f"{', '.join(names())}")
    name = family(method_class(method))
    return [f"lr={_text(table[name])}"] if name in table else []


def _fixed(argv: list[str]) -> list[str]:
    """The command line's plain `key=value` overrides (its comma lists are axes)."""
    return [o.input_line for o in OverridesParser.create().parse_overrides(argv) if not o.is_sweep_override()]


def _sweep_section(argv: list[str]) -> dict:
    return _preset(_fixed(argv))[2]


def bisect_spec(section: dict) -> Bisect | None:
    """The sweep section's `bisect`, checked (None: one run per point)."""
    spec = section.get("bisect")
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise UserError(f"sweep.bisect must be a mapping of its keys (key, start, field, at_most...), not {spec!r}")
    return validate(Bisect, spec, section="sweep.bisect")


def strategy(argv: list[str]) -> Bisect | None:
    """The preset's `sweep.bisect` (None: one run per point)."""
    return bisect_spec(_sweep_section(argv))


def control_overrides(overrides: list[str], run) -> list[str] | None:
    """The overrides of the run's exact control (`config.control_config`; None: the run is exact): its
    own, with the method section and the codec replaced by the control's (options at their defaults
    left out, so the control composes to the same record as the same run named by hand), without `workers`
    where the control runs in one process (`single`: one run beside the runs of every count)."""
    from benchmarks.run.config import control_config
    from benchmarks.run.method import method_defaults

    control = control_config(run)
    if control is None:
        return None
    method, defaults = control.as_dict()["method"], method_defaults(control.method_name)
    codec_off = control.comm != run.comm  # the control's codec is the default: none
    kept = [o for o in overrides if _key(o) != "method" and not _key(o).startswith("method.")
            and not (codec_off and _key(o).startswith("comm."))]
    return _one_run_for_every_count(kept + [f"method={method['name']}"] + [
        f"method.{k}={_text(v)}" for k, v in method.items() if k not in ("name", "plugin") and defaults.get(k) != v],
        method["name"])


def with_controls(runs: list[list[str]], configs: list, machine: bool, lr_by_family: dict | None = None,
                  fixed: list[str] = ()) -> tuple[list, list]:
    """`runs` and `configs` with every run's exact control added right after it (`sweep.controls`; so a sweep
    stopped half way leaves pairs, not runs without their controls), each once and only if no run of the
    sweep is it already (the same record path). A control trains at its own family's learning rate
    (`lr_by_family`; the preset's `lr` where the table names none), unless the command line (`fixed`) sets `lr`;
    a sweep over rates passes no table, and each control keeps its run's rate."""
    have = {path_of(cfg) for cfg in configs}
    by_hand = any(_key(o) == "lr" for o in fixed)
    controls = [control_overrides(o, cfg) for o, cfg in zip(runs, configs)]
    controls = [c if c is None or not lr_by_family or by_hand else _merge(
        [o for o in c if _key(o) != "lr"], family_lr(dict(o.split("=", 1) for o in c)["method"], lr_by_family))
        for c in controls]
    wanted = [c for c in controls if c is not None]
    composed = iter(checked(wanted, None, machine) if wanted else [])
    out_runs, out_configs = [], []
    for overrides, cfg, control in zip(runs, configs, controls):
        out_runs.append(overrides)
        out_configs.append(cfg)
        if control is None:
            continue
        control_cfg = next(composed)
        if path_of(control_cfg) not in have:
            have.add(path_of(control_cfg))
            out_runs.append(control)
            out_configs.append(control_cfg)
    return out_runs, out_configs


def lr_swept(argv: list[str]) -> bool:
    """Whether the sweep's axes (its preset's or the command line's comma lists) include `lr`."""
    return "lr" in _axes(OverridesParser.create().parse_overrides(argv), _preset(_fixed(argv))[1])


def checked(runs: list[list[str]], spec: Bisect | None, machine: bool = True) -> list:
    """Every run's configuration (a bisection's: its first probe's; a `config.RunConfig`), composed and
    checked as the run will check it (`runner.plan`; with `machine=False`, only what needs no look at this machine:
    `config.check`, for commands printed to run elsewhere). The first bad one raises a UserError
    naming the run; nothing has started then."""
    from benchmarks.run.config import check
    from benchmarks.run.runner import plan

    configs = []
    for i, overrides in enumerate(runs, 1):
        if spec is not None:
            overrides = _merge(overrides, [f"{spec.key}={spec.start}"])
        try:
            try:
                cfg = config_of(overrides)
            except (HydraException, OmegaConfBaseException) as e:
                raise composition_error(e, overrides) from None
            run = plan(cfg).cfg if machine else check(cfg)
        except UserError as e:
            raise UserError(f"run {i}/{len(runs)} ({' '.join(overrides)}): {e}") from None
        configs.append(run)
    return configs


def path_of(run) -> Path:
    """Where this run's record is (a pure function of its configuration)."""
    from benchmarks.run.record import record_path

    return record_path(run)


def kept(run) -> dict | None:
    """This run's `ok` record when it exists and resume is on (what a resumed sweep skips)."""
    from benchmarks.run.record import ok_record

    return ok_record(path_of(run)) if run.resume else None


#: `GNNBENCH_SWEEP_FORK=off`: every run of a sweep starts as a fresh `python -m benchmarks` process
#: (the warm parent's isolation is tested against it: tests/benchmarks/test_sweep_fork.py).
SWEEP_FORK = "GNNBENCH_SWEEP_FORK"


def forking() -> bool:
    """Whether this sweep may fork its runs (`GNNBENCH_SWEEP_FORK` is not off; CUDA runs start fresh
    whatever it says: `warm_up`)."""
    return os.environ.get(SWEEP_FORK, "on").lower() not in ("0", "off", "false", "no")


def warm_up(configs: list) -> bool:
    """Make this sweep the warm parent of its runs: import what a run imports (torch, the runner, the
    pre-flight check, torch._dynamo, which every optimizer imports), start the ranks' fork server and
    load each dataset once, so a run forked from here starts in a fraction of a second instead of
    about 5 s. False where runs start fresh: GNNBENCH_SWEEP_FORK=off, or a CUDA run (a CUDA context does
    not survive a fork). What torch computes here (loading a dataset) runs on one thread: an OpenMP
    thread pool does not survive a fork either (a forked run's first parallel operation would hang),
    and a pool that was never started is started afresh in each run (`_forked_run`)."""
    if not forking() or any(c.device != "cpu" for c in configs):
        return False
    import gc

    import torch
    import torch._dynamo  # noqa: F401
    import benchmarks.commands.outcome  # noqa: F401 (what a run imports: the runner, through run_and_report)
    import benchmarks.run.runner  # noqa: F401
    from benchmarks.core import datasets
    from benchmarks.run import rank_server
    from benchmarks.run.record import processes_of

    global _RUN_THREADS
    _RUN_THREADS = torch.get_num_threads()
    torch.set_num_threads(1)
    for cfg in configs:
        datasets.preload(cfg.dataset_section, cfg.data_root)
    if any(processes_of(cfg) > 1 for cfg in configs):
        rank_server.serve()
    gc.freeze()  # what is loaded now is never garbage: a run's collections skip it instead of copying it
    return True


#: The thread count a forked run starts with: this process's own before `warm_up` kept it to one.
_RUN_THREADS = 1


def _forked_run(config: dict, output: str, preflight, run_id: str) -> None:
    """A run in a child forked from the warm sweep: what `python -m benchmarks` does with the
    configuration the sweep composed and checked, the pre-flight check it was handed included, without
    starting Python, importing torch or composing again; its output into `output`, its record with
    `run_id` (`record.RUN_ID`)."""
    from benchmarks.commands.outcome import run_and_report
    from benchmarks.run.record import RUN_ID

    os.environ[RUN_ID] = run_id
    become_child(lambda: run_and_report(config, preflight), output, output, _RUN_THREADS)


def become_child(work, stdout: str, stderr: str, threads: int) -> None:
    """In a child forked from a warm parent (`warm_up`, or the tests' tests/commands.py): die with the
    parent, write to the files `stdout` and `stderr` (one path: one file for both), read nothing, fork
    ranks from the parent's fork server, compute on `threads` threads (a pool of its own); then
    `work()`, and exit with the status a fresh `python -m` process would have: its SystemExit's (a
    message printed, as Python prints it), 1 with the traceback for anything else."""
    import traceback

    from benchmarks.run import rank_server
    from benchmarks.base.leftovers import killed_with_parent

    killed_with_parent()
    opened: dict[str, int] = {}
    for fd, path in ((1, stdout), (2, stderr)):
        if path not in opened:
            opened[path] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(opened[path], fd)
    for target in opened.values():
        os.close(target)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    rank_server.adopt()
    import torch
    torch.set_num_threads(threads)
    code = 0
    try:
        work()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else int(e.code is not None)
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 (a bug: its traceback is the output, as in a fresh process)
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class Ended(NamedTuple):
    """How a run's process ended: what it printed (its last line says the outcome), its exit status
    (-N: killed by signal N) and its pid (its scratch folder is named with it)."""

    output: str
    code: int
    pid: int


def _run_forked(run, preflight, run_id: str) -> Ended:
    """Fork `run` from this warm sweep (`warm_up`), wait for it. A stop stops it as a user would."""
    import multiprocessing as mp
    import tempfile

    from benchmarks.base.leftovers import temporary_prefix
    from benchmarks.run import rank_server
    from benchmarks.run.record import processes_of

    if processes_of(run) > 1:
        rank_server.serve()  # a fresh fork server if the last one died (killed by the out-of-memory killer)
    fd, output = tempfile.mkstemp(prefix=temporary_prefix("gnnbench-run-"), suffix=".log")  # a killed sweep's: removed
    os.close(fd)
    proc = mp.get_context("fork").Process(target=_forked_run, args=(run.as_dict(), output, preflight, run_id),
                                          name="gnnbench-run")
    try:
        proc.start()
        try:
            proc.join()
        except Stopped:
            proc.terminate()  # the run stops its ranks and records itself as failed
            proc.join(60)
            if proc.is_alive():
                proc.kill()  # its ranks die with it (leftovers.die_with_launcher)
                proc.join()
            raise
        return Ended(Path(output).read_text(errors="replace"), proc.exitcode, proc.pid)
    finally:
        os.unlink(output)


def run_one(overrides: list[str], run, warm: bool = False, preflight=None) -> dict | None:
    """The run `overrides` compose to (`run`, checked): forked from this warm sweep (`warm`; with the
    pre-flight check `preflight`), else `python -m benchmarks <overrides>` in a fresh process (which
    checks it itself); prints its last line and returns the record it wrote (None if none: refused
    before it started, a UserError). The run is judged by the record it wrote, which carries the id
    handed to it (`record.RUN_ID`), never by one an earlier run left at its path (`resume=false`); a
    resumed run that finds an ok record there (another sweep's, written meanwhile) skips, and that
    record counts. A run whose process died without writing its record (killed by a signal; a bug
    outside its ranks, exit status 1) gets a failed record written here, with its traceback."""
    import json
    import uuid

    from benchmarks.base.outputs import NotWritten
    from benchmarks.commands.outcome import summary_line
    from benchmarks.run.runner import record_death

    run_id = uuid.uuid4().hex
    ended = _run_forked(run, preflight, run_id) if warm else _run_fresh(overrides, run_id)
    lines = ended.output.strip().splitlines() or ["(no output)"]
    try:
        record = json.loads(path_of(run).read_text())
    except (OSError, ValueError):
        record = None
    skipped = run.resume and ended.code == 0 and record is not None and record.get("status") == "ok"
    if record is not None and record.get("run_id") != run_id and not skipped:
        record = None  # not this run's
    if record is None and (ended.code < 0 or ended.code == 1):
        error, tb = _death(ended)
        try:
            path = record_death(run.as_dict(), ended.pid, error, tb, run_id)
            record = json.loads(path.read_text())
            lines.append(f"{summary_line(record)} (recorded by the sweep: {path})")
        except NotWritten as e:
            lines.append(f"FAILED: {error}; error: {e}")
    print(f"  {lines[-1]}", flush=True)
    return record


def _death(ended: Ended) -> tuple[str, str]:
    """The error and traceback of a run whose process died without writing its record: the signal that
    killed it, or the last line and the traceback it printed (an exception outside its ranks)."""
    if ended.code < 0:
        name = signal.Signals(-ended.code).name
        return f"the run's process was killed by {name}" + (" (out of memory?)" if name == "SIGKILL" else ""), ""
    start = ended.output.find("Traceback (most recent call last):")
    last = ended.output.strip().splitlines()[-1:] or [f"the run's process exited with status {ended.code}"]
    return last[0], ended.output[start:] if start >= 0 else ended.output


def _run_fresh(overrides: list[str], run_id: str) -> Ended:
    """`python -m benchmarks <overrides>` in its own process, waited for; what it printed, its stderr
    first (the last line is then its stdout's, the outcome, or where it printed nothing there, its
    error). A stop stops it as a user would."""
    from benchmarks.base.leftovers import killed_with_parent
    from benchmarks.run.record import RUN_ID

    # The run dies with the sweep, even a SIGKILLed one (its ranks then die with it); a stop is below.
    # COMPOSED: the sweep composed and checked this run before it started the first (`expand`), so
    # the run does not compose it a second time to check it (composition.check_composes): ~0.4 s a run.
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks", *overrides], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=killed_with_parent,
                            env={**os.environ, COMPOSED: "1", RUN_ID: run_id})
    try:
        stdout, stderr = proc.communicate()
    except Stopped:
        # Stop the run the way a user would: it stops its ranks and records itself as failed.
        proc.terminate()
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()  # its ranks die with it (leftovers.die_with_launcher)
            proc.communicate()
        raise
    return Ended("\n".join((stderr, stdout)), proc.returncode, proc.pid)


def first_line(runs: list[list[str]], minutes: float | None, warm: bool) -> str:
    """What the sweep is about to do, before it does it: `sweep: 41 runs to go (method: 21 values; workers:
    1, 2), about 2 min on the machine the preset was timed on; each forked from this warm process (...)`.
    The estimate is the preset's own `sweep.minutes` (measured for its whole sweep); the time left that
    each run's line gives follows what this machine does."""
    values: dict[str, list[str]] = {}
    for overrides in runs:
        for o in overrides:
            key, value = o.split("=", 1)
            if value not in values.setdefault(key, []):
                values[key].append(value)
    axes = [f"{k}: {len(v)} values" if len(v) > 3 else f"{k}: {', '.join(v)}" for k, v in values.items() if len(v) > 1]
    about = f"about {duration(minutes * 60)} on the machine its preset was timed on" if minutes else None
    how = (f"each forked from this warm process (torch, the runner and the datasets loaded once; {SWEEP_FORK}=off "
           "starts each afresh)") if warm else "each in a fresh process"
    return f"sweep: {len(runs)} runs to go" + (f" ({'; '.join(axes)})" if axes else "") + \
        (f", {about}" if about else "") + f"; {how}"


def field(record: dict, dotted: str):
    for part in dotted.split("."):
        record = record[part]
    return record


def meets(record: dict | None, spec: Bisect) -> bool:
    """Whether a bisection probe's record is ok and its field is within the bound."""
    if record is None or record["status"] != "ok":
        return False
    value = field(record, spec.field)
    return isinstance(value, (int, float)) and spec.holds(value)  # null: the probe measured no such number


def bisect(fits, start: int, factor: float = 2.0, tolerance: float = 0.1) -> tuple[int | None, int | None]:
    """(largest value found that fits, smallest found that does not) for a predicate that holds
    below some threshold: step from `start` by `factor` until both sides are seen, then halve the
    gap until it is within `tolerance` of the lower value. (None, hi) if not even 1 fits."""
    lo = hi = None
    value = int(start)
    while lo is None or hi is None:  # a bracket around the threshold
        if fits(value):
            lo, value = value, max(value + 1, int(value * factor))
        else:
            hi, value = value, int(value / factor)
            if value < 1 and lo is None:
                return None, hi
    while hi - lo > max(1, tolerance * lo):
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo, hi


def _bisect_run(overrides: list[str], spec: Bisect, counts: dict) -> None:
    def fits(value: int) -> bool:
        probe = _merge(overrides, [f"{spec.key}={value}"])
        from benchmarks.run.config import check

        cfg = check(config_of(probe))
        record = kept(cfg)
        if record is not None:
            counts["kept"] += 1
        else:
            record = run_one(probe, cfg)
            counts["ok" if record and record["status"] == "ok" else "failed_probes"] += 1
        ok = meets(record, spec)
        print(f"  {spec.key}={value}: {'meets' if ok else 'does not meet'} {spec.field} {spec.bound}", flush=True)
        return ok

    lo, hi = bisect(fits, spec.start, spec.factor, spec.tolerance)
    print(f"  largest {spec.key} that meets it: {lo} (smallest that does not: {hi})", flush=True)


#: In an ad hoc sweep's records folder: its command (`ad_hoc_folder`).
SWEEP_COMMAND = "sweep-command.txt"


def ad_hoc_folder(argv: list[str], create: bool) -> tuple[list[str], str | None]:
    """An ad hoc sweep (no `results_dir` from the command line or a preset: the default of
    conf/config.yaml) gets a records folder of its own under the default, named by when it first ran
    (`results/runs/20261206-151300`), so two ad hoc sweeps never mix in one report. Its command is
    kept in it (`SWEEP_COMMAND`): the same command run again finds the newest folder it made and
    resumes there, as a preset's sweep resumes in the preset's folder. Returns (`argv` with
    `results_dir=<folder>` added, the folder), or (`argv`, None) where the sweep names its folder.
    `create`: make the folder and keep the command (not for a dry run)."""
    if any(_key(a) == "results_dir" for a in argv):
        return argv, None
    parsed = OverridesParser.create().parse_overrides(argv)
    chosen = _preset([o.input_line for o in parsed if not o.is_sweep_override()])[0].results_dir
    default = OmegaConf.load(CONF / "config.yaml").results_dir
    if chosen != default:  # a preset's folder
        return argv, None
    command = " ".join(sorted(argv))
    earlier = [f.parent for f in sorted(Path(default).glob(f"*/{SWEEP_COMMAND}"))
               if f.read_text().strip() == command]
    folder = earlier[-1] if earlier else Path(default) / time.strftime("%Y%m%d-%H%M%S")
    if not earlier:  # another command's folder of the same second
        folder = next(f for f in itertools.chain([folder], (Path(f"{folder}-{n}") for n in itertools.count(2)))
                      if not f.exists())
    if create and not earlier:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / SWEEP_COMMAND).write_text(command + "\n")
    return [*argv, f"results_dir={folder}"], str(folder)


def records_line(configs: list) -> str:
    """The sweep's last line: where its records are and the command that reads them."""
    folders = list(dict.fromkeys(str(c.results_dir) for c in configs))
    return f"records: {', '.join(folders)} · next: " + " && ".join(
        f"python -m analysis report {shlex.quote(f)}" for f in folders)


def expected_time(minutes: float | None, to_go: int, total: int) -> str | None:
    """`about 3 min on the machine its preset was timed on`: the preset's `sweep.minutes` (its whole
    sweep) in proportion to the runs still to go; None where the preset does not say."""
    if not minutes or not to_go:
        return None
    return f"about {duration(minutes * 60 * to_go / total)} on the machine its preset was timed on"


def main(argv=None, preflight=None) -> None:
    """The sweep. `preflight`: the pre-flight memory check its forked runs pass, as the entry point
    hands it (`python -m benchmarks.commands.sweep` and `python -m benchmarks -m` do; None: none)."""
    try:
        with stop_on_signals():
            sweep(sys.argv[1:] if argv is None else argv, preflight)
    except Stopped as e:
        print(f"sweep {e}: the run in progress, if any, is recorded as failed; the same command resumes",
              file=sys.stderr)
        sys.exit(128 + e.signum)


def sweep(argv: list[str], preflight=None) -> None:
    dry_run = "--dry-run" in argv
    argv = [a for a in argv if a != "--dry-run"]
    try:
        check_overrides(argv)
        if not dry_run and forking():  # the ranks' fork server imports torch while this does (`warm_up` uses it)
            from benchmarks.run import rank_server
            rank_server.start(argv)
        check_composes(argv)
        try:
            argv, own_folder = ad_hoc_folder(argv, create=not dry_run)
            runs, missing = expand(argv)
            section = _sweep_section(argv)
            spec = bisect_spec(section)
        except (HydraException, OmegaConfBaseException) as e:
            raise composition_error(e, argv) from None
        configs = checked(runs, spec, machine=not dry_run)
        if section.get("controls"):
            rates = None if lr_swept(argv) else section.get("lr_by_family")
            runs, configs = with_controls(runs, configs, machine=not dry_run, lr_by_family=rates, fixed=_fixed(argv))
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    if own_folder:
        print(f"records: {own_folder} (this command's own folder: the same command resumes there)", flush=True)
    for name in missing:
        print(f"skip: method '{name}' is not available in this checkout (methods: "
              f"{', '.join(method_names())})", flush=True)
    if not dry_run:  # said here, once: the runs inherit that it was said (their output is not shown)
        from benchmarks.core import native
        for cfg in configs:
            native.resolve(cfg.kernel, cfg.device, log=lambda line: print(line, flush=True))
    # A probe that does not fit (even one that fails: out of memory) is an answer, not a failure.
    counts = {"ok": 0, "kept": 0, "failed": 0, "failed_probes": 0}
    # The time left is the mean wall time of the runs this sweep ran times the runs still to run: a
    # run kept from an earlier sweep takes none, so it counts in neither (a bisection's kept probes
    # are found as it goes: each bisection counts as still to run).
    found = [None if spec is not None else kept(cfg) for cfg in configs]  # each record read once
    waiting = [spec is not None or record is None for record in found]
    # Warm only for plain runs: a bisection's probes may not fit, and run as fresh processes.
    warm = not dry_run and spec is None and any(waiting) and warm_up(
        [cfg for cfg, wait in zip(configs, waiting) if wait])
    if not dry_run and any(waiting):
        print(first_line([o for o, wait in zip(runs, waiting) if wait], section.get("minutes"), warm), flush=True)
    ran, ran_s = 0, 0.0
    for i, (overrides, cfg) in enumerate(zip(runs, configs), 1):
        head = f"[{i}/{len(runs)}] {' '.join(overrides)}"
        so_far = (f"{counts['failed']} failed so far" if counts["failed"] else None,
                  time_left(ran, sum(waiting[i - 1:]), ran_s))
        started, probes = time.monotonic(), counts["ok"] + counts["failed_probes"]
        if spec is not None:
            if dry_run:
                first = _merge(overrides, [f"{spec.key}={spec.start}"])
                print(f"python -m benchmarks {shlex.join(first)}")
                continue
            print(progress_line(f"{head}: bisect {spec.key}", *so_far), flush=True)
            _bisect_run(overrides, spec, counts)
            if counts["ok"] + counts["failed_probes"] > probes:  # not every probe was kept
                ran, ran_s = ran + 1, ran_s + time.monotonic() - started
            continue
        if found[i - 1] is not None:
            counts["kept"] += 1
            print(f"{head}: kept (ok record exists)", flush=True)
            continue
        if dry_run:
            print(f"python -m benchmarks {shlex.join(overrides)}")
            continue
        print(progress_line(head, *so_far), flush=True)
        record = run_one(overrides, cfg, warm, preflight)
        counts["ok" if record and record["status"] == "ok" else "failed"] += 1
        ran, ran_s = ran + 1, ran_s + time.monotonic() - started
    if not dry_run:
        print(f"sweep: {len(runs)} runs: {counts['ok']} ran, {counts['kept']} kept, {counts['failed']} failed"
              + (f", {counts['failed_probes']} probes too big or failed" if spec is not None else "")
              + (f"; {len(missing)} method(s) not available: {', '.join(missing)}" if missing else "")
              + ("; the same command reruns the failed ones" if counts["failed"] else ""), flush=True)
    else:
        # comments after the commands: the output stays a script (`... --dry-run | sh`)
        to_go = sum(waiting)
        expected = expected_time(section.get("minutes"), to_go, len(runs))
        print(f"# dry run: {to_go} of {len(runs)} runs to go" + (f", {counts['kept']} kept" if counts["kept"] else "")
              + f", {expected or 'no expected time (the preset states no sweep.minutes)'}", flush=True)
    if configs:
        print(("# " if dry_run else "") + records_line(configs), flush=True)
    if counts["failed"]:
        sys.exit(1)


if __name__ == "__main__":  # a program of its own: the entry point hands it the pre-flight check
    from benchmarks.__main__ import preflight_checks

    main(preflight=preflight_checks()[0])
