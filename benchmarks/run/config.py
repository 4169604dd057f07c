"""The run configuration's schema: every key of a composed config is declared once, typed and bounded
(benchmarks/base/options.py), and `check` holds a config to it before anything is loaded.

- the top-level keys: `RunOptions` here (its defaults are conf/config.yaml's);
- `dataset.*`: per dataset (`datasets.options`: `synthetic`'s generator parameters, a real dataset's
  name alone);
- `model.*`: `models.ModelOptions`;
- `method.*`: the method's `Options` (its plugin's, resolved through the registry).

An unknown key anywhere is refused in one line that names the valid ones. `check` returns the run as
one typed, frozen `RunConfig`: launchers, ranks, the record and plugins read its attributes.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import ClassVar, Literal, Optional

from benchmarks.core import datasets
from benchmarks.core.aggregation import KERNELS
from benchmarks.core.draws import DRAWS
from benchmarks.base.errors import UserError, choose
from benchmarks.run.method import method_class
from benchmarks.core.models import DECAYED, MODELS, PRECISIONS, MemoryOptions, ModelOptions
from benchmarks.base.options import RESERVED, Options, as_dict, defaults, option, seed_option, validate
from benchmarks.base.registry import alias_of
from benchmarks.core.partition import PARTITIONERS
from benchmarks.core.quantize import CommOptions
from benchmarks.run.stopping import STOPPING

#: The sections of a run config, each one config group (`method=...`) with its own options.
SECTIONS = ("method", "dataset", "model")
#: Sections of options that compose with any method (the survey's savers), each one dataclass.
SAVERS = {"memory": MemoryOptions, "comm": CommOptions}


#: Where a run keeps things on one machine. The only keys torchrun's nodes may set apart: each machine
#: has its own disks and folders. Every other key is the run's own (what is trained, how, how long,
#: what is recorded, when it times out), so every rank must hold the same value; what the folders
#: hold must agree too, which the ranks check by comparing their partitions (`runner._check_ranks_agree`).
PER_MACHINE = ("data_root", "cache_dir", "results_dir")


def flat(cfg: dict, prefix: str = "") -> dict:
    """A configuration's values by dotted key (`method.sync_every`), as an override names them."""
    out = {}
    for key, value in cfg.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


#: A paper preset's regime, item by item (`regime`): what the reference code does besides the method.
REGIME_ITEMS = ("preprocessing", "regularisation", "stopping", "runs")
REGIME_VERDICTS = ("followed:", "deviation:")


def check_regime(regime: dict) -> None:
    """Every item of a preset's `regime` is there, and each says whether it is followed or how it deviates."""
    missing = [item for item in REGIME_ITEMS if item not in regime]
    unknown = sorted(set(regime) - set(REGIME_ITEMS))
    if missing or unknown:
        raise UserError(f"regime must name each of {', '.join(REGIME_ITEMS)} (missing: {', '.join(missing) or 'none'}; "
                        f"unknown: {', '.join(unknown) or 'none'})")
    for item in REGIME_ITEMS:
        said = regime[item]
        items = said if isinstance(said, list) else [said]
        for text in items:
            if not isinstance(text, str) or not text.startswith(REGIME_VERDICTS):
                raise UserError(f"regime.{item} must start with 'followed:' or 'deviation:' (got {text!r})")


@dataclass(frozen=True)
class RunOptions(Options):
    """The top-level keys of a run config (conf/config.yaml says the same, with the defaults)."""

    reserved: ClassVar[tuple[str, ...]] = (*SECTIONS, *SAVERS)

    # Messages of the form `<key> must be ... (got <value>)` are older than this schema; kept word for word.
    # Each doc is the option reference's (docs/options.md); a key's error line says it too, in parentheses.
    workers: int = option(2, "ranks (processes); `single` always uses 1", ge=1,
                          message="workers must be a positive integer (got {value!r})")
    epochs: int = option(50, "training epochs", ge=1, message="epochs must be a positive integer (got {value!r})")
    lr: float = option(0.01, "learning rate", ge=0)
    weight_decay: float = option(0.0, "Adam's weight decay", ge=0)
    weight_decay_layers: Literal[DECAYED] = option(
        "all", "the parameters weight decay applies to: all (Adam's default); first (the first layer's: Kipf & "
               "Welling, tkipf/gcn models.py); all_but_last (every layer but the output one: GAS's "
               "reg_weight_decay, rusty1s/pyg_autoscale). GAT's reference decays every variable (PetarV-/GAT "
               "models/base_gattn.py: its filter of bias names matches no TensorFlow variable name): all. Named "
               "in a record's variant")
    stopping: Literal[STOPPING] = option(
        "none", "early stopping (benchmarks/run/stopping.py): none (every epoch runs; the model of the best validation "
                "accuracy is reported); window (Kipf & Welling: stop once the validation loss exceeds the mean of "
                "the `patience` epochs before; the last model is reported); patience (Velickovic et al.: stop after "
                "`patience` epochs in which neither validation accuracy nor loss improved; the last model that "
                "improved both is reported); plateau (stop after `patience` epochs without a better validation "
                "accuracy; the model of the best validation accuracy is reported). Needs eval_every=1")
    patience: int = option(10, "stopping's window (window) or patience (patience, plateau), in epochs", ge=1)
    hidden: int = option(128, "channels of every hidden layer", ge=1,
                         message="hidden must be a positive integer (got {value!r})")
    layers: int = option(3, "GNN layers", ge=1, message="layers must be a positive integer (got {value!r})")
    dropout: float = option(0.5, "dropout probability before every layer", ge=0, lt=1,
                            message="dropout must be in [0, 1) (got {value!r})")
    batch_norm: bool = option(False, "batch norm between layers, statistics over all nodes of all ranks (exact "
                                     "methods stay exact)")
    seed: int = seed_option(doc="model initialisation, dropout and partitioning")
    partitioner: Literal[PARTITIONERS] = option(
        "metis", "metis: balanced on nodes and training nodes; metis_edges: also on in-edges, as SAR's partitions "
                 "(its own cache); random; contiguous")
    kernel: Literal[KERNELS] = option(
        "native", "aggregation and dropout kernel of every method: native (the suite's CPU kernels, "
                  "benchmarks/core/native.c, built on first use; where they cannot be built the run takes spmm's "
                  "path, says so in one line and records it in env.agg_kernel), spmm (torch's CSR products, no "
                  "per-edge tensors, as DGL's fused "
                  "builtins, which SAR's papers' vanilla ran: docs/sar.md) or messages (gather, scale, index_add per "
                  "edge, as PyG does). Compared like a method option: a record's variant names a kernel other than "
                  "native and its setting leaves the kernel out")
    draws: Literal[DRAWS] = option(
        "layout", "where training's randomness comes from: layout (every draw keyed by seed, epoch, step, layer, "
                  "node and column, never by rank: exact layouts equal single seed for seed) or per_rank (the "
                  "rank's number in every key: each rank its own sample, as the reference codes' per-process "
                  "generators). benchmarks/core/draws.py; a record's variant names per_rank")
    precision: Literal[tuple(PRECISIONS)] = option(
        "fp32", "autocast dtype of the dense parts; aggregation kernels stay fp32, and rows exchanged after a "
                "projection travel in the low precision (half the bytes). fp16 scales the loss (dynamic, GradScaler) "
                "where the method applies precision=fp16; other methods refuse it (docs/savers.md)")
    device: Literal["cpu", "cuda"] = option("cpu", "cuda uses NCCL unless backend=gloo")
    backend: Literal["auto", "gloo", "nccl"] = option("auto", "the process group's: auto is gloo on cpu, nccl on cuda")
    eval_every: int = option(1, "exact full-graph evaluation every k epochs (and after the last)", ge=1)
    straggler_delay_s: Optional[list[float]] = option(
        [], "injected heterogeneity: seconds each rank sleeps per training step, a list with one per rank (cycled)",
        ge=0, empty=True, message="straggler_delay_s must be a list of seconds >= 0, one per rank (got {value!r})")
    warmup_epochs: int = option(5, "epochs dropped from the epoch-time median (at least 1 when there are 2+ "
                                   "epochs), in which the memory probe measures the training working set", ge=0)
    threads_per_rank: Optional[int] = option(None, "CPU threads per rank; null: cores / workers", ge=1)
    malloc_mmap_threshold: Optional[int] = option(  # mallopt takes a C int
        65536, "bytes: a fixed glibc mmap threshold, so RSS follows live tensors (docs/measurement.md); null: "
               "glibc's default", ge=1, lt=2 ** 31,
        message="malloc_mmap_threshold must be null or a number of bytes in [1, 2^31) (got {value!r})")
    dist_timeout_s: float = option(300, "seconds a collective may wait (the process group's timeout)", gt=0)
    probe_grads: bool = option(False, "tests: also save epoch 0's synchronised gradients beside the record")
    allow_nonfinite: bool = option(False, "true: a NaN or infinite loss or accuracy does not end the run (false: "
                                          "it ends as failed)")
    log_every: int = option(10, "print progress, with the time left, every k epochs; 0: quiet", ge=0)
    data_root: Optional[str] = option(None, "real datasets' folder; null: the project's data/ (Cora and CiteSeer "
                                            "ship there; other datasets are downloaded there)")
    cache_dir: str = option(".cache", "partition cache and scratch")
    results_dir: str = option("results/runs", "where records are written")
    resume: bool = option(True, "skip a run whose ok record exists (a failed one runs again); false: rerun it")
    force: bool = option(False, "run even where the pre-flight memory check projects that a rank's peak exceeds the "
                                "memory this machine gives it (docs/measurement.md); false: such a run is refused in "
                                "one line, before any rank starts")
    reproduces: Optional[str] = option(None, "set by paper presets: the table of results/reference/papers.csv "
                                             "the report compares the run with")
    regime: Optional[dict] = option(None, "set by presets that claim a paper's regime: each item of it "
                                          f"({', '.join(REGIME_ITEMS)}) as 'followed: <how>' or 'deviation: "
                                          "<what differs>' (tests/test_paper_presets.py; not hashed)")
    study: Optional[str] = option(None, "set by study presets: the section of `python -m analysis report` that "
                                        "reads the run")
    study_margin_pt: Optional[float] = option(None, "set by study presets: the equivalence margin, in accuracy points, "
                                                    "its verdicts test (TOST), declared before the runs", gt=0)
    sweep: Optional[dict] = option(None, "set by presets: how `python -m benchmarks.commands.sweep` expands them "
                                         "(variants, extra overrides, skips, controls, bisection: docs/analysis.md)")

    def check(self, run) -> None:
        if self.regime is not None:
            check_regime(self.regime)
        if self.stopping != "none" and self.eval_every != 1:
            raise UserError(f"stopping={self.stopping} reads every epoch's validation: set eval_every=1 "
                            f"(got eval_every={self.eval_every})")
        if (self.backend_name == "nccl") != (self.device == "cuda"):
            raise UserError(f"backend={self.backend_name} does not fit device={self.device}: use gloo on cpu and "
                            "nccl on cuda (or backend=auto)")

    @property
    def backend_name(self) -> str:
        """The process group's backend: `backend`, or for `auto` the device's (gloo on cpu, nccl on cuda)."""
        if self.backend != "auto":
            return self.backend
        return "nccl" if self.device == "cuda" else "gloo"


@dataclass(frozen=True)
class RunConfig(RunOptions):
    """A validated run: the top-level options as attributes (`run.epochs`), each section typed
    (`run.model.heads`, `run.memory.checkpoint`, `run.method.sync_every`) with its group's choice beside
    it (`model_name`, `dataset_name`), and the method resolved once (`method_name` as chosen, an alias
    or a plugin; `method_cls`, the plugin's class). Built only by
    `check`; frozen, so what was checked is what runs. `as_dict()` is the complete configuration,
    as the record stores and hashes it."""

    dataset: datasets.DatasetOptions = None
    model: ModelOptions = None
    memory: MemoryOptions = None
    comm: CommOptions = None
    method: Options = None
    dataset_name: str = ""
    model_name: str = ""
    method_name: str = ""
    method_cls: type = None

    @property
    def plugin(self) -> str:
        """The plugin module the method runs (`pipegcn` for the alias `pipegcn_gf`)."""
        return self.method_cls.__module__.rpartition(".")[2]

    @property
    def dataset_section(self) -> dict:
        """The `dataset` section as plain values (its name and options): what `datasets.load_dataset` reads."""
        return {"name": self.dataset_name, **as_dict(self.dataset)}

    def as_dict(self) -> dict:
        """The complete configuration as plain values: every key, every option filled in."""
        top = as_dict(self, declared_by=RunOptions)
        method = {"name": self.method_name, **({"plugin": self.plugin} if self.plugin != self.method_name else {})}
        return {**top, "dataset": self.dataset_section,
                "model": {"name": self.model_name, **as_dict(self.model)},
                "memory": as_dict(self.memory), "comm": as_dict(self.comm),
                "method": {**method, **as_dict(self.method)}}


def check(cfg: dict) -> RunConfig:
    """Hold every key of the composed run config `cfg` to the schema and return it typed; nothing is
    loaded and nothing about this machine is asked (`runner.plan` adds that). UserError otherwise.
    The sections are checked in order, each against the run so far: the top level, the dataset, the
    model and the savers see the top-level options; the method sees every other section."""
    top = validate(RunOptions, cfg, None, section="")
    for section in SECTIONS:
        if not isinstance(cfg.get(section), dict) or not isinstance(cfg[section].get("name"), str):
            raise UserError(f"the config has no {section} (choose one with {section}=<name>)")
    dataset = cfg["dataset"]
    options_cls = datasets.options(dataset["name"])
    generator_keys = ({f.name for f in fields(datasets.SyntheticOptions)}
                      - {f.name for f in fields(datasets.DatasetOptions)})
    if options_cls is not datasets.SyntheticOptions and generator_keys & set(dataset):
        key = min(generator_keys & set(dataset))
        raise UserError(f"dataset.{key} is an option of dataset=synthetic, not of dataset={dataset['name']} "
                        f"(a preset's dataset.* keys are for its synthetic graph; drop it with ~dataset.{key})")
    sections = {"dataset": validate(options_cls, dataset, top, section="dataset")}
    choose("model", cfg["model"]["name"], MODELS)
    sections["model"] = validate(ModelOptions, cfg["model"], top, section="model")
    sections["model"].check_for(cfg["model"]["name"], top.hidden)
    for section, saver_cls in SAVERS.items():
        if not isinstance(cfg.get(section, {}), dict):
            raise UserError(f"{section} is a section of options ({section}.<option>=<value>), not a value "
                            f"(got {section}={cfg[section]!r})")
        sections[section] = validate(saver_cls, cfg.get(section, {}), top, section=section)
    name = cfg["method"]["name"]
    method_cls = method_class(name)
    plugin = (alias_of(name) or {}).get("plugin")
    if cfg["method"].get("plugin", plugin) != plugin:  # only an alias's YAML names a plugin
        raise UserError(f"method.plugin={cfg['method']['plugin']} is not an option: an alias YAML in conf/method/ "
                        f"names its plugin; choose the method with method=<name> (drop method.plugin)")
    run = RunConfig(**{f.name: getattr(top, f.name) for f in fields(RunOptions)}, **sections,
                    dataset_name=dataset["name"], model_name=cfg["model"]["name"], method_name=name,
                    method_cls=method_cls)
    run = replace(run, method=validate(method_cls.Options, cfg["method"], run))
    check_savers(run)
    return run


#: The savers and axes that compose with any method, in the order a record's variant names them.
SAVER_AXES = ("kernel", "draws", "memory", "precision", "comm", "dataset.transform", "weight_decay_layers")
#: The axes of the regime, not of the method: every method applies them (`check_savers` asks no plugin).
REGIME_AXES = ("dataset.transform", "weight_decay_layers")


def moved_savers(cfg: dict) -> list[tuple[str, object]]:
    """The savers and axes a configuration moves away from the schema's defaults, as (option, value)
    in the variant's order: ("kernel", "messages"), ("memory.checkpoint", "layer"). `cfg`: a
    configuration as a dict (`RunConfig.as_dict()`, or a record's stored one: an older record may
    lack a key, which then counts as its default)."""
    top = defaults(RunOptions)
    moved = []
    for key in SAVER_AXES:
        if key in SAVERS:
            default = defaults(SAVERS[key])
            moved += [(f"{key}.{k}", v) for k, v in sorted((cfg.get(key) or {}).items()) if default.get(k) != v]
        elif key.startswith("dataset."):  # one option of the dataset section (`dataset.transform`)
            option = key.partition(".")[2]
            default = defaults(datasets.DatasetOptions)[option]
            if (cfg.get("dataset") or {}).get(option, default) != default:
                moved.append((key, cfg["dataset"][option]))
        elif cfg.get(key, top[key]) != top[key]:
            moved.append((key, cfg[key]))
    return moved


def check_savers(run: RunConfig) -> None:
    """Refuse, in one line, a saver or axis that `run`'s method does not apply (`Method.applies`)."""
    applies, name = run.method_cls.applies, run.method_name
    if run.model.attention_dropout and "model.attention_dropout" not in applies:
        raise UserError(f"method={name} does not apply model.attention_dropout (its attention draws no per-edge "
                        f"mask; `python -m benchmarks --methods` lists the methods that do)")
    for saver, value in moved_savers(run.as_dict()):
        if saver in REGIME_AXES:
            continue
        section = saver.partition(".")[0] if "." in saver else ""
        if {section, saver, f"{saver}={value}"} & applies:
            continue
        if saver == "comm.quantize" and run.comm.quantize_grads and "comm.quantize_grads" in applies:
            continue  # the codec of the gradients this method does send
        if saver == "precision" and value == "fp16" and "precision=bf16" in applies:
            raise UserError(f"precision=fp16 needs loss scaling, which method={name} does not apply "
                            "(use precision=bf16, whose range is fp32's)")
        sent = ("; it sends only gradients between ranks: quantise them with comm.quantize_grads=true"
                if saver == "comm.quantize" and "comm.quantize_grads" in applies else "")
        raise UserError(f"method={name} does not apply {saver}={value}: a record must not name a saver that "
                        f"did not run{sent}; drop {saver} (method={name} applies: "
                        f"{', '.join(sorted(applies)) or 'none of the savers'})")


def control_config(run: RunConfig) -> RunConfig | None:
    """The run config of `run`'s exact control: its method's `exact_control` applied and a lossy
    codec (`comm.quantize`) switched off, everything else (seed, partition, model, layer 0) the same;
    None when `run` is its own control (an exact method, or an approximation already switched off)."""
    spec = dict(run.method_cls.About.exact_control or {})
    if not spec and run.comm.quantize == "none" and not alias_of(run.method_name):
        return None  # an exact method, run without a lossy codec: nothing to switch off
    cfg = run.as_dict()
    method = cfg["method"]
    name = spec.pop("name", run.method_name)
    declared = defaults(method_class(name).Options)  # the control's options and their plugin defaults
    if name == run.method_name:
        section = {**method, **spec}
    else:
        section = {"name": name, **{k: v for k, v in method.items() if k in declared}, **spec}
    alias = alias_of(name)
    if alias and all(section.get(k) == declared.get(k) for k in alias if k not in (*RESERVED, "defaults")):
        # the control switches off all the alias sets (pipegcn_gf's: pipegcn without pipelining): one
        # control, named by its plugin, serves every alias of it
        section = {"name": alias["plugin"], **{k: v for k, v in section.items() if k not in RESERVED}}
    control = {**cfg, "method": section}
    if run.comm.quantize != "none":
        control["comm"] = {**cfg["comm"], "quantize": "none", "quantize_grads": False}
    control = check(control)
    return None if control.as_dict() == cfg else control
