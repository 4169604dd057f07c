"""Hardware profiles (benchmarks/tools/hardware.py): a written profile reads back as written, each kind of
bad input is one line naming the key; and `python -m benchmarks.tools.calibrate --quick` writes a profile
the loader accepts, every value positive."""
from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import yaml

from benchmarks.tools import hardware
from benchmarks.base.errors import UserError
from benchmarks.tools.hardware import HardwareProfile, load_profile, profile_names
from tests import commands

PROFILE = {
    "name": "demo",
    "description": "a test node",
    "device": "cpu",
    "units_per_node": 1,
    "ranks_per_node": 64,
    "memory_bytes": 2.5e10,
    "memory_bandwidth": 1.0e10,
    "gather_bandwidth": 3.0e9,
    "dense_flops": {"fp32": 1.0e11, "bf16": 5.0e10, "fp16": 5.0e10},
    "intra_node": {"bandwidth": 2.0e9, "latency": 5.0e-5},
    "inter_node": {"bandwidth": 1.0e9, "latency": 1.0e-4},
    "sources": {"memory_bandwidth": "a stream add", "dense_flops.bf16": "torch.mm"},
    "cores": 2,
}
GPU = {**PROFILE, "name": "gpus", "device": "cuda", "units_per_node": 4, "ranks_per_node": 4}
del GPU["cores"]


def write(folder, values: dict, text: str | None = None):
    path = folder / f"{values.get('name', 'demo')}.yaml"
    path.write_text(yaml.safe_dump(values) if text is None else text)
    return path


def edited(**changes) -> dict:
    """PROFILE with keys replaced (None: removed); `a.b` reaches into a section."""
    values = copy.deepcopy(PROFILE)
    for key, value in changes.items():
        *head, last = key.split("__")
        where = values
        for h in head:
            where = where[h]
        if value is None:
            del where[last]
        else:
            where[last] = value
    return values


@pytest.mark.fast
def test_round_trip_by_path_and_by_name(tmp_path, monkeypatch):
    # What a profile's author writes (exponents without a dot and sign, as in the schema) reads as numbers.
    text = yaml.safe_dump(PROFILE).replace("25000000000.0", "2.5e10")
    assert "2.5e10" in text
    profile = load_profile(str(write(tmp_path, PROFILE, text)))
    assert isinstance(profile, HardwareProfile)
    assert profile.memory_bytes == 2.5e10 and profile.ranks_per_node == 64 and profile.cores == 2
    assert profile.dense_flops == PROFILE["dense_flops"] and profile.intra_node == PROFILE["intra_node"]
    assert profile.flops("bf16") == 5.0e10 and profile.single_thread is None
    with pytest.raises(AttributeError):  # frozen
        profile.memory_bytes = 1
    # A bare name reads conf/hardware/<name>.yaml; the folder's profiles are the names.
    monkeypatch.setattr(hardware, "FOLDER", tmp_path)
    write(tmp_path, GPU)
    assert profile_names() == ["demo", "gpus"]
    assert load_profile("demo") == profile
    assert load_profile("gpus").units_per_node == 4
    single = edited(single_thread={"dense_flops_fp32": 3e10, "gather_bandwidth": 1e9, "memory_bandwidth": 5e9})
    assert load_profile(str(write(tmp_path, single))).single_thread["gather_bandwidth"] == 1e9


@pytest.mark.fast
def test_precisions_are_the_runs():
    from benchmarks.core.models import PRECISIONS

    assert hardware.DENSE_DTYPES == tuple(PRECISIONS)


BAD = [
    (edited(memory_bandwidth=None), "missing key memory_bandwidth"),
    (edited(intra_node__latency=None), "missing key intra_node.latency"),
    (edited(dense_flops__fp16=None), "missing key dense_flops.fp16"),
    (edited(bandwidth=5), "unknown key bandwidth; valid keys are:"),
    (edited(inter_node__jitter=1.0), "unknown option inter_node.jitter"),
    (edited(gather_bandwidth=0), "gather_bandwidth=0 must be a positive number"),
    (edited(intra_node__latency=-1e-5), "intra_node.latency=-1e-05 must be a positive number"),
    (edited(memory_bytes="lots"), "memory_bytes='lots' must be a positive number"),
    (edited(memory_bandwidth=float("nan")), "memory_bandwidth=nan must be a positive number"),
    (edited(ranks_per_node=2.5), "ranks_per_node=2.5 must be a positive integer"),
    (edited(dense_flops__fp8=1e12), "unknown precision 'fp8'; choose one of: bf16, fp16, fp32"),
    (edited(dense_flops__bf16=True), "dense_flops.bf16=True must be a positive number"),
    (edited(intra_node=2e9), "intra_node=2000000000.0 must be a mapping"),
    (edited(device="tpu"), "unknown device 'tpu'; choose one of: cpu, cuda"),
    (edited(units_per_node=2), "units_per_node=2 for device=cpu"),
    ({**GPU, "cores": 8}, "leave them out of a device=cuda profile"),
    (edited(sources__latency="x"), "sources names an unknown key latency"),
    (edited(sources__memory_bandwidth="two\nlines"), "sources.memory_bandwidth must be one line"),
    (edited(name="other"), "name='other' must be the file's stem, 'demo'"),
]


@pytest.mark.fast
@pytest.mark.parametrize("values, message", BAD, ids=[m.split(" must")[0][:40] for _, m in BAD])
def test_bad_profiles_are_one_line(tmp_path, values, message):
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(values))
    with pytest.raises(UserError) as e:
        load_profile(str(path))
    assert message in str(e.value) and "\n" not in str(e.value)
    assert str(e.value).startswith(str(path))  # the file is named


@pytest.mark.fast
def test_missing_profiles_and_unreadable_files(tmp_path, monkeypatch):
    monkeypatch.setattr(hardware, "FOLDER", tmp_path)
    write(tmp_path, PROFILE)
    write(tmp_path, GPU)
    with pytest.raises(UserError, match=r"^unknown hardware profile 'h100'; choose one of: demo, gpus$"):
        load_profile("h100")
    with pytest.raises(UserError, match="^no hardware profile at"):
        load_profile(str(tmp_path / "absent.yaml"))
    (tmp_path / "broken.yaml").write_text("name: [unclosed\n")
    with pytest.raises(UserError, match="not a readable YAML file"):
        load_profile(str(tmp_path / "broken.yaml"))
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(UserError, match="must be a mapping"):
        load_profile(str(tmp_path / "list.yaml"))


def test_no_torch_for_analysis():
    code = "import sys, benchmarks.tools.hardware; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.fast
def test_latency_and_bandwidth_fit():
    from benchmarks.tools.calibrate import fit_link

    exact = {n: 5e-5 + n / 2e9 for n in (1 << 10, 1 << 14, 1 << 18, 1 << 22, 1 << 26)}
    latency, bandwidth = fit_link(exact)
    assert latency == pytest.approx(5e-5, rel=1e-6) and bandwidth == pytest.approx(2e9, rel=1e-6)
    # Noise that pushes the fitted latency below zero: the smallest message's time stands in.
    latency, _ = fit_link({1 << 10: 1e-6, 1 << 20: 1e-3, 1 << 26: 0.07})
    assert latency == 1e-6
    # Noise that makes the large messages look faster than the small (CI once fitted -2.5 GB/s): the largest
    # message's rate stands in, and both figures stay positive, as a profile requires.
    latency, bandwidth = fit_link({1 << 10: 3e-3, 1 << 20: 2e-3, 1 << 26: 1e-3})
    assert latency == 3e-3 and bandwidth == pytest.approx((1 << 26) / 1e-3)


def test_quick_calibration_writes_a_valid_profile(tmp_path):
    out = commands.run("benchmarks.tools.calibrate", "--quick", "--out", str(tmp_path), "--name", "t", timeout=120)
    assert out.returncode == 0, out.stderr
    path = tmp_path / "t.yaml"
    assert f"wrote {path}" in out.stdout and "Warning" not in out.stderr
    profile = load_profile(str(path))
    assert profile.name == "t" and profile.device == "cpu" and profile.units_per_node == 1
    assert profile.single_thread is not None and profile.cores >= 1

    def numbers(value):
        if isinstance(value, dict):
            for v in value.values():
                yield from numbers(v)
        elif isinstance(value, (int, float)):
            yield value

    measured = list(numbers({f: getattr(profile, f) for f in hardware.FIELDS if f != "sources"}))
    # 16 rates and sizes, plus dropout's and GAT attention's (2 widths), each also on one thread, and
    # the GEMM's share at 2 widths, and the samplers' rates (neighbour draws and induced subgraphs,
    # every core and one thread)
    assert len(measured) == 28 and all(v > 0 for v in measured)
    assert set(profile.sources) >= {"memory_bandwidth", "gather_bandwidth", "dense_flops.fp32", "intra_node"}
    bad = commands.run("benchmarks.tools.calibrate", "--quick", "--name", "../x")
    assert bad.returncode == 2 and "must be a plain file name" in bad.stderr
