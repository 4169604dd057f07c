"""Hardware profiles: the rates a cost model projects a method's epoch time and memory with
(`conf/hardware/<name>.yaml`; `python -m benchmarks.tools.calibrate` writes this machine's). SI units:
bytes, seconds, bytes/s, FLOP/s.

    name: this-machine            # the file's stem
    description: "..."
    device: cpu                   # cuda | cpu
    units_per_node: 1             # compute units per node: GPUs; 1 for a CPU node (its ranks share its cores)
    ranks_per_node: 1024          # ranks the cluster runs per node
    memory_bytes: 2.5e10          # per unit: GPU memory, or a CPU node's RAM
    memory_bandwidth: 1.0e10      # bytes/s per unit, streaming elementwise kernels
    gather_bandwidth: 3.0e9       # bytes/s per unit in sparse aggregation: edges x width x element bytes / s
    dense_flops: {fp32: 1.0e11, bf16: 5.0e10, fp16: 5.0e10}   # FLOP/s per unit in GEMMs
    intra_node: {bandwidth: 2.0e9, latency: 5.0e-5}            # per rank, point to point: bytes/s, s/message
    inter_node: {bandwidth: 1.0e9, latency: 1.0e-4}
    sources: {memory_bandwidth: "...", ...}                     # where each value comes from
    cores: 2                      # optional, cpu only: the node's cores
    dense_width_efficiency: {64: 0.5, 256: 1.0}   # optional: GEMM rate by inner width, relative
    dropout_rate: 1.0e8           # optional: elements/s through dropout's forward (absent: bytes at memory_bandwidth)
    single_thread: {dense_flops_fp32: ..., gather_bandwidth: ..., memory_bandwidth: ..., dropout_rate: ...}  # optional

A profile is held to its declaration with the suite's option checks (`benchmarks.base.options`), so bad
input is one line naming the file and the key. No torch here: analysis imports this module.
"""
from __future__ import annotations

import dataclasses
from dataclasses import MISSING, dataclass
from pathlib import Path
from typing import ClassVar, Literal, Optional

from omegaconf import OmegaConf

from benchmarks.base.errors import UserError, choose
from benchmarks.base.options import Options, option, validate
from benchmarks.base.registry import CONF

FOLDER = CONF / "hardware"
#: The dense rates a profile states, one per `precision` choice (`models.PRECISIONS`, restated here so
#: that no torch is imported; a test holds the two equal).
DENSE_DTYPES = ("fp32", "bf16", "fp16")


@dataclass(frozen=True)
class Link(Options):
    """`intra_node` / `inter_node`: a point-to-point message between two ranks takes
    latency + bytes / bandwidth."""

    reserved: ClassVar[tuple[str, ...]] = ()
    bandwidth: float = option(MISSING, "bytes/s per rank, point to point", gt=0)
    latency: float = option(MISSING, "seconds per message", gt=0)


@dataclass(frozen=True)
class DenseFlops(Options):
    """`dense_flops`: FLOP/s per unit achieved by GEMMs, by precision."""

    reserved: ClassVar[tuple[str, ...]] = ()
    fp32: float = option(MISSING, "FLOP/s per unit", gt=0)
    bf16: float = option(MISSING, "FLOP/s per unit", gt=0)
    fp16: float = option(MISSING, "FLOP/s per unit", gt=0)


@dataclass(frozen=True)
class SingleThread(Options):
    """`single_thread` (optional, cpu): the rates of one thread, what a rank gets when ranks
    outnumber cores (`threads_per_rank` = cores / P, at least 1)."""

    reserved: ClassVar[tuple[str, ...]] = ()
    dense_flops_fp32: float = option(MISSING, "FLOP/s of one thread", gt=0)
    gather_bandwidth: float = option(MISSING, "bytes/s of one thread", gt=0)
    memory_bandwidth: float = option(MISSING, "bytes/s of one thread", gt=0)
    dropout_rate: Optional[float] = option(None, "elements/s through dropout's forward, one thread", gt=0)
    attention_rate: Optional[dict] = option(None, "GAT edge-heads/s by channels per head, one thread")
    sampler_rate: Optional[float] = option(None, "sampled edges/s of the neighbour sampler, one thread", gt=0)
    subgraph_rate: Optional[float] = option(None, "in-edges/s an induced subgraph's construction scans, one thread",
                                            gt=0)


#: The nested sections and their declarations.
SECTIONS = {"dense_flops": DenseFlops, "intra_node": Link, "inter_node": Link, "single_thread": SingleThread,
            "host_link": Link}


@dataclass(frozen=True)
class HardwareProfile:
    """One profile, validated (`load_profile`). Its fields are declared like a section's options
    (`options.validate` checks them; the nested sections are plain dicts, checked by `SECTIONS`)."""

    reserved: ClassVar[tuple[str, ...]] = ()
    name: str = option(MISSING, "the file's stem")
    description: str = option(MISSING)
    device: Literal["cuda", "cpu"] = option(MISSING)
    units_per_node: int = option(MISSING, "compute units per node: GPUs, 1 for a CPU node", ge=1)
    ranks_per_node: int = option(MISSING, "ranks per node", ge=1)
    memory_bytes: float = option(MISSING, "bytes per unit", gt=0)
    memory_bandwidth: float = option(MISSING, "bytes/s per unit, streaming elementwise kernels", gt=0)
    gather_bandwidth: float = option(MISSING, "bytes/s per unit in sparse aggregation", gt=0)
    dense_flops: dict = option(MISSING, "FLOP/s per unit by precision: fp32, bf16, fp16")
    intra_node: dict = option(MISSING, "bandwidth and latency between ranks of a node")
    inter_node: dict = option(MISSING, "bandwidth and latency between ranks of different nodes")
    sources: dict = option(MISSING, "where each value comes from, one line each")
    cores: Optional[int] = option(None, "cores of a CPU node", ge=1)
    single_thread: Optional[dict] = option(None, "one thread's rates")
    # where absent (GPUs: counter-based generators run near memory speed), dropout's forward costs the
    # bytes it reads and writes at memory_bandwidth
    dropout_rate: Optional[float] = option(None, "elements/s through dropout's forward (draw, mask, scale)", gt=0)
    # optional: a GEMM's rate relative to dense_flops by its inner width, the dimension it sums over
    # ({64: 0.5, 256: 1.0}); narrow products run below the peak on a CPU. Absent: every width at dense_flops.
    dense_width_efficiency: Optional[dict] = option(None, "GEMM rate by inner width, relative to dense_flops")
    # optional: GAT's aggregation (logits, edge softmax, weighted sum) forward and backward, in
    # edge-heads/s by channels per head ({16: 2e7, 64: 1e7}); absent: priced as gathers and passes
    attention_rate: Optional[dict] = option(None, "GAT edge-heads/s forward and backward, by channels per head")
    # the sampled families (neighbour sampling, local rounds, LLCG's server): the neighbour sampler's
    # rate per rank, on the host cores that serve a rank
    sampler_rate: Optional[float] = option(None, "sampled edges/s per rank (the suite's sampler, calibrated)", gt=0)
    # the subgraph families (Cluster-GCN, GraphSAINT): building a batch's induced subgraph, per rank
    subgraph_rate: Optional[float] = option(None, "in-edges/s per rank an induced subgraph's construction scans "
                                            "(calibrated)", gt=0)
    # where a GPU's sampled batches, caches and GAS's histories live: host memory per node and the
    # link between it and one device; absent on a CPU node (its memory is the host's)
    host_memory_bytes: Optional[float] = option(None, "host memory per node, bytes", gt=0)
    host_link: Optional[dict] = option(None, "bandwidth and latency between host memory and one device")

    def check(self, cfg: dict) -> None:
        """The nested sections, then what holds across fields."""
        for key in self.dense_flops:
            choose("precision", key, DENSE_DTYPES)
        for key, cls in SECTIONS.items():
            if getattr(self, key) is not None:
                section(cls, getattr(self, key), key)
        for channels, rate in (self.attention_rate or {}).items():
            if not (isinstance(channels, int) and channels > 0 and isinstance(rate, (int, float)) and rate > 0):
                raise UserError(f"attention_rate maps channels per head to edge-heads/s, got {channels}: {rate}")
        for width, share in (self.dense_width_efficiency or {}).items():
            if not (isinstance(width, int) and width > 0 and isinstance(share, (int, float)) and 0 < share <= 10):
                raise UserError(f"dense_width_efficiency maps inner widths to rate shares, got {width}: {share}")
        for key, text in self.sources.items():
            if key.split(".")[0] not in FIELDS:
                raise UserError(f"sources names an unknown key {key}; sources describe the profile's keys")
            if not isinstance(text, str) or "\n" in text:
                raise UserError(f"sources.{key} must be one line of text")
        if self.device == "cpu" and self.units_per_node != 1:
            raise UserError(f"units_per_node={self.units_per_node} for device=cpu: a CPU node is one unit "
                            "(its ranks share its cores)")
        if self.device == "cuda" and (self.cores is not None or self.single_thread is not None):
            raise UserError("cores and single_thread describe a CPU node; leave them out of a device=cuda profile")

    def flops(self, precision: str) -> float:
        """Dense FLOP/s per unit at a run's `precision`."""
        return self.dense_flops[choose("precision", precision, DENSE_DTYPES)]


FIELDS = [f.name for f in dataclasses.fields(HardwareProfile)]


def section(cls, values, key: str = ""):
    """`values` (a profile, or its section `key`) as `cls`, every declared key required unless it
    has a default; a one-line UserError naming the key otherwise."""
    if not isinstance(values, dict):
        raise UserError(f"{key or 'a hardware profile'} must be a mapping, not {values!r}")
    return validate(cls, values, section=key)


def profile_names() -> list[str]:
    """The profiles in conf/hardware/."""
    return sorted(p.stem for p in FOLDER.glob("*.yaml"))


def profile_path(name_or_path: str) -> Path:
    """A bare name is conf/hardware/<name>.yaml; anything with a suffix or a folder is a path."""
    path = Path(name_or_path)
    if path.suffix or len(path.parts) > 1:
        if not path.is_file():
            raise UserError(f"no hardware profile at {path}")
        return path
    return FOLDER / f"{choose('hardware profile', name_or_path, profile_names())}.yaml"


def from_dict(values: dict, where: str = "hardware profile") -> HardwareProfile:
    """A profile's values (as read from its YAML) validated; `where` starts every error."""
    try:
        return section(HardwareProfile, values)
    except UserError as e:
        raise UserError(f"{where}: {e}") from None


def load_profile(name_or_path: str) -> HardwareProfile:
    """The profile `conf/hardware/<name>.yaml`, or the YAML file at a path."""
    path = profile_path(name_or_path)
    try:
        values = OmegaConf.to_container(OmegaConf.load(path))  # OmegaConf reads 2.5e10 as a number
    except Exception as e:  # noqa: BLE001 (any parse error is the file's)
        raise UserError(f"{path}: not a readable YAML file ({type(e).__name__})") from None
    profile = from_dict(values, str(path))
    if profile.name != path.stem:
        raise UserError(f"{path}: name={profile.name!r} must be the file's stem, {path.stem!r}")
    return profile
