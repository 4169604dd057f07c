"""The run configuration's schema: every key of a composed config is declared once, typed and bounded
(benchmarks/options.py), and `check` holds a config to it before anything is loaded.

- the top-level keys: `RunOptions` here (its defaults are conf/config.yaml's);
- `dataset.*`: per dataset (`datasets.options`: `synthetic`'s generator parameters, a real dataset's
  name alone);
- `model.*`: `models.ModelOptions`;
- `method.*`: the method's `Options` (`method.resolve`).

An unknown key anywhere is refused in one line that names the valid ones.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import ClassVar, Literal, Optional

from benchmarks import datasets
from benchmarks.aggregation import KERNELS
from benchmarks.errors import UserError, choose
from benchmarks.method import Method, resolve
from benchmarks.models import MODELS, PRECISIONS, MemoryOptions, ModelOptions
from benchmarks.options import Options, option, validate
from benchmarks.partition import PARTITIONERS
from benchmarks.quantize import CommOptions

#: The sections of a run config, each one config group (`method=...`) with its own options.
SECTIONS = ("method", "dataset", "model")
#: Sections of options that compose with any method (the survey's savers), each one dataclass.
SAVERS = {"memory": MemoryOptions, "comm": CommOptions}


@dataclass
class RunOptions(Options):
    """The top-level keys of a run config (conf/config.yaml says the same, with the defaults)."""

    reserved: ClassVar[tuple[str, ...]] = (*SECTIONS, *SAVERS)

    # Messages of the form `<key> must be ... (got <value>)` are older than this schema; kept word for word.
    workers: int = option(2, ge=1, message="workers must be a positive integer (got {value!r})")
    epochs: int = option(50, ge=1, message="epochs must be a positive integer (got {value!r})")
    lr: float = option(0.01, "learning rate", ge=0)
    weight_decay: float = option(0.0, ge=0)
    hidden: int = option(128, ge=1, message="hidden must be a positive integer (got {value!r})")
    layers: int = option(3, ge=1, message="layers must be a positive integer (got {value!r})")
    dropout: float = option(0.5, ge=0, lt=1, message="dropout must be in [0, 1) (got {value!r})")
    batch_norm: bool = option(False)
    seed: int = option(0, ge=0)
    partitioner: Literal[PARTITIONERS] = option("metis")
    kernel: Literal[KERNELS] = option(
        "spmm", "aggregation kernel: spmm (fused CSR, as DGL's builtins) | messages (per-edge messages, as PyG)")
    precision: Literal[tuple(PRECISIONS)] = option(
        "fp32", "autocast dtype of the dense parts: fp32 | bf16 | fp16 (with loss scaling)")
    device: Literal["cpu", "cuda"] = option("cpu")
    backend: Literal["auto", "gloo", "nccl"] = option("auto")
    eval_every: int = option(1, "evaluate every k epochs", ge=1)
    straggler_delay_s: Optional[list[float]] = option(
        [], ge=0, empty=True, message="straggler_delay_s must be a list of seconds >= 0, one per rank (got {value!r})")
    warmup_epochs: int = option(5, "epochs dropped from the epoch-time median", ge=0)
    threads_per_rank: Optional[int] = option(None, "null: cores / workers", ge=1)
    malloc_mmap_threshold: Optional[int] = option(  # mallopt takes a C int
        65536, ge=1, lt=2 ** 31,
        message="malloc_mmap_threshold must be null or a number of bytes in [1, 2^31) (got {value!r})")
    dist_timeout_s: float = option(300, "seconds a collective may wait", gt=0)
    probe_grads: bool = option(False)
    allow_nonfinite: bool = option(False, "true: a NaN or infinite loss or accuracy does not end the run")
    log_every: int = option(10, "0: quiet", ge=0)
    data_root: Optional[str] = option(None)
    cache_dir: str = option(".cache")
    results_dir: str = option("results/runs")
    resume: bool = option(True)
    reproduces: Optional[str] = option(None, "the reference table a paper preset reproduces")
    study: Optional[str] = option(None, "the study section that reads the run")
    sweep: Optional[dict] = option(None, "a preset's sweep, read by benchmarks.sweep")

    def check(self, cfg: dict) -> None:
        backend = backend_of(dataclasses.asdict(self))
        if (backend == "nccl") != (self.device == "cuda"):
            raise UserError(f"backend={backend} does not fit device={self.device}: use gloo on cpu and nccl on cuda "
                            "(or backend=auto)")


def backend_of(cfg: dict) -> str:
    if cfg["backend"] != "auto":
        return cfg["backend"]
    return "nccl" if cfg["device"] == "cuda" else "gloo"


def check(cfg: dict) -> tuple[type[Method], Options]:
    """Hold every key of the run config `cfg` to the schema; nothing is loaded and nothing about this
    machine is asked (`runner.plan` adds that). Returns the method class and its validated options
    (`cfg["method"]` becomes the complete options, as `method.resolve` does); UserError otherwise.
    Dataset and model sections are checked, never rewritten (a record's name hashes them as given)."""
    validate(RunOptions, cfg, cfg, section="")
    for section in SECTIONS:
        if not isinstance(cfg.get(section), dict) or not isinstance(cfg[section].get("name"), str):
            raise UserError(f"the config has no {section} (choose one with {section}=<name>)")
    dataset = cfg["dataset"]
    options_cls = datasets.options(dataset["name"])
    generator_keys = {f.name for f in fields(datasets.SyntheticOptions)}
    if options_cls is not datasets.SyntheticOptions and generator_keys & set(dataset):
        key = min(generator_keys & set(dataset))
        raise UserError(f"dataset.{key} is an option of dataset=synthetic, not of dataset={dataset['name']} "
                        f"(a preset's dataset.* keys are for its synthetic graph; drop it with ~dataset.{key})")
    validate(options_cls, dataset, cfg, section="dataset")
    choose("model", cfg["model"]["name"], MODELS)
    validate(ModelOptions, cfg["model"], cfg, section="model")
    for section, options_cls in SAVERS.items():
        if not isinstance(cfg.get(section, {}), dict):
            raise UserError(f"{section} is a section of options ({section}.<option>=<value>), not a value "
                            f"(got {section}={cfg[section]!r})")
        validate(options_cls, cfg.get(section, {}), cfg, section=section)
    method_cls, options = resolve(cfg)
    if cfg.get("precision") == "fp16" and not method_cls.loss_scaling:
        raise UserError(f"precision=fp16 needs loss scaling, which method={cfg['method']['name']} does not apply "
                        "(use precision=bf16, whose range is fp32's)")
    if (cfg.get("memory") or {}).get("checkpoint", "none") != "none" and not method_cls.recomputable:
        raise UserError(f"memory.checkpoint does not apply to method={cfg['method']['name']}: its aggregation "
                        "keeps state across a step that a recompute would change (use memory.checkpoint=none)")
    return method_cls, options
