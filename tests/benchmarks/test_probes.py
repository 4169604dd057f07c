"""The memory and time probes on their own: the /proc readers, the peak reset, the training-segment
bookkeeping of MemoryProbe (evaluation excluded) and the timer."""
from __future__ import annotations

import mmap
import subprocess
import sys
import types

import numpy as np
import pytest
import torch

from benchmarks.core import probes
from benchmarks.core.probes import (MemoryProbe, Timer, fix_mmap_threshold, hwm_bytes, reset_hwm, rss_bytes,
                               shared_excess_bytes)

pytestmark = pytest.mark.fast

MiB = 1 << 20
CPU = torch.device("cpu")


def touched(nbytes: int) -> mmap.mmap:
    """Fresh anonymous pages, every one written, so they count in RSS; freed (unmapped) when dropped.
    A mapping of its own, not a tensor: what an earlier test in this process left to the allocators
    (a cached block, a heap kept by a raised mmap threshold, `probes.fix_mmap_threshold`) can hand
    a tensor pages that are resident already, and RSS would not move."""
    pages = mmap.mmap(-1, nbytes)
    for offset in range(0, nbytes, mmap.PAGESIZE):
        pages[offset] = 1
    return pages


class FakeProc:
    """/proc/self/status in miniature: RSS, and a high-water mark that follows it up and resets to it."""

    def __init__(self, rss: int, hwm: int, code: int = 0):
        self.rss, self.hwm, self.code = rss, hwm, code  # code: RSS in the shared libraries' mappings

    def alloc_and_free(self, nbytes: int) -> None:
        self.hwm = max(self.hwm, self.rss + nbytes)

    def reset(self) -> bool:
        self.hwm = self.rss
        return True


def test_readers_give_the_process_rss_and_a_peak_at_least_as_high():
    """rss_bytes and hwm_bytes read positive whole-KiB values, the peak never below RSS."""
    rss = rss_bytes()
    hwm = hwm_bytes()
    assert 0 < rss <= hwm and rss % 1024 == 0 and hwm % 1024 == 0


def test_the_libraries_rss_is_part_of_rss_and_grows_when_new_code_runs():
    """library_rss_bytes counts the shared libraries' resident pages: a part of RSS, which a kernel
    run for the first time can only add to."""
    before = probes.library_rss_bytes()
    assert 0 < before < rss_bytes()
    torch.linalg.svd(torch.randn(64, 64))  # LAPACK's code, not called before in this process, most likely
    assert probes.library_rss_bytes() >= before


def test_rss_follows_a_touched_allocation():
    """Writing 64 MiB raises RSS by about that much."""
    before = rss_bytes()
    x = touched(64 * MiB)
    assert rss_bytes() - before >= 48 * MiB
    del x


def test_reset_hwm_brings_the_peak_down_to_the_current_rss():
    """After a freed 64 MiB allocation the peak stays high; a reset brings it back to RSS (when the
    kernel allows the reset; otherwise reset_hwm says False and the peak is untouched)."""
    x = touched(64 * MiB)
    del x
    peak = hwm_bytes()
    assert peak - rss_bytes() >= 48 * MiB
    if reset_hwm():
        assert hwm_bytes() < peak - 32 * MiB
    else:
        assert hwm_bytes() >= peak


def test_memory_probe_keeps_evaluation_out_of_the_training_peak(monkeypatch):
    """Segments: training peaks are maxed over segments, evaluation peaks go to the overall peak only,
    and the working set is the training peak minus RSS at train start; its data part leaves out the
    library code faulted in by the time of each segment's peak."""
    proc = FakeProc(rss=100 * MiB, hwm=150 * MiB, code=20 * MiB)  # loading peaked at 150 MiB
    monkeypatch.setattr(probes, "rss_bytes", lambda: proc.rss)
    monkeypatch.setattr(probes, "library_rss_bytes", lambda: proc.code)
    monkeypatch.setattr(probes, "hwm_bytes", lambda: proc.hwm)
    monkeypatch.setattr(probes, "reset_hwm", proc.reset)
    monkeypatch.setattr(probes, "shared_excess_bytes", lambda: 10 * MiB)
    probe = MemoryProbe(CPU)
    probe.start_training()
    proc.code += 6 * MiB  # the first backward's kernels: their code pages, part of the peak below
    proc.alloc_and_free(40 * MiB)  # epoch 1
    probe.pause()
    proc.code += 3 * MiB  # evaluation's own kernels
    proc.alloc_and_free(500 * MiB)  # evaluation
    probe.resume()
    proc.alloc_and_free(30 * MiB)  # epoch 2
    probe.pause()
    assert probe.result() == {
        "peak_rss_bytes": 600 * MiB, "peak_pss_bytes": 590 * MiB, "rss_train_start_bytes": 100 * MiB,
        "process_peak_rss_bytes": 600 * MiB, "process_peak_pss_bytes": 590 * MiB,
        "train_peak_rss_bytes": 140 * MiB, "train_mem_delta_bytes": 40 * MiB, "hwm_resettable": True,
        "train_code_pages_bytes": 9 * MiB, "train_data_delta_bytes": 34 * MiB,  # 140 - 6 - 100 > 130 - 9 - 100
    }


def test_the_process_peak_covers_the_epochs_after_the_probe(monkeypatch):
    """The probe measures the warm-up epochs only; a larger peak after them (the timed allocator's
    retention, a later evaluation) is in the process's peak over the run, not in the probe's."""
    proc = FakeProc(rss=100 * MiB, hwm=150 * MiB)
    monkeypatch.setattr(probes, "rss_bytes", lambda: proc.rss)
    monkeypatch.setattr(probes, "hwm_bytes", lambda: proc.hwm)
    monkeypatch.setattr(probes, "reset_hwm", proc.reset)
    monkeypatch.setattr(probes, "shared_excess_bytes", lambda: 10 * MiB)
    probe = MemoryProbe(CPU, probe_epochs=1)
    probe.start_training()
    proc.alloc_and_free(40 * MiB)  # the warm-up epoch
    probe.pause()
    probe.epoch_done(0)  # the probe ends
    probe.resume()
    proc.alloc_and_free(300 * MiB)  # a timed epoch
    result = probe.result()
    assert (result["peak_rss_bytes"], result["peak_pss_bytes"]) == (150 * MiB, 140 * MiB)
    assert (result["process_peak_rss_bytes"], result["process_peak_pss_bytes"]) == (400 * MiB, 390 * MiB)


def test_memory_probe_sees_a_real_allocation_inside_a_training_segment():
    """A 64 MiB allocation made and freed while training shows in train_peak and the working set."""
    probe = MemoryProbe(CPU)
    probe.start_training()
    x = touched(64 * MiB)
    del x
    probe.pause()
    result = probe.result()
    assert result["train_mem_delta_bytes"] >= 48 * MiB
    assert result["rss_train_start_bytes"] < result["train_peak_rss_bytes"] <= result["peak_rss_bytes"]


def test_pss_counts_a_shared_file_once_between_the_processes_that_map_it(tmp_path):
    """A 64 MiB file mapped and read by this process and a child: RSS counts all of it in each,
    PSS half, so RSS - PSS grows by about 32 MiB while the child holds it."""
    path = tmp_path / "shared.bin"
    path.write_bytes(b"\1" * (64 * MiB))
    mapped = np.memmap(path, dtype=np.uint8, mode="r")
    assert int(mapped.sum()) == 64 * MiB  # every page read, so resident
    alone = shared_excess_bytes()
    if alone is None:
        pytest.skip("no /proc/self/smaps_rollup on this platform")
    child = subprocess.Popen([sys.executable, "-c", "import sys, numpy as np; "
                              f"m = np.memmap({str(path)!r}, dtype=np.uint8, mode='r'); int(m.sum()); "
                              "print('ready', flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        assert shared_excess_bytes() - alone >= 24 * MiB
    finally:
        child.communicate("")


def test_without_smaps_rollup_pss_is_none_on_the_rank_and_in_the_summary(monkeypatch):
    """Where the kernel has no smaps_rollup the rank's peak PSS is None, and so are the summary's
    PSS fields (a PSS sum over ranks missing one rank would mislead)."""
    monkeypatch.setattr(probes, "shared_excess_bytes", lambda: None)
    rank = MemoryProbe(CPU).result()
    assert rank["peak_pss_bytes"] is None and rank["peak_rss_bytes"] > 0
    def summary(ranks):
        return {key: reduce(r[field] for r in ranks) for key, (field, reduce) in MemoryProbe.SUMMARY.items()}

    assert summary([{**rank, "peak_pss_bytes": 5}, rank])["peak_pss_bytes_sum"] is None
    measured = summary([{**rank, "peak_pss_bytes": 5}, {**rank, "peak_pss_bytes": 7}])
    assert (measured["peak_pss_bytes_max"], measured["peak_pss_bytes_sum"]) == (7, 12)


def test_fix_mmap_threshold_says_whether_it_was_applied(monkeypatch):
    """The suite's default 64 KiB is applied on glibc (True); None keeps glibc's default and a C
    library without mallopt (no libc.so.6) changes nothing (both False)."""
    assert fix_mmap_threshold(65536) is True
    assert fix_mmap_threshold(None) is False

    def no_glibc(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(probes, "ctypes", types.SimpleNamespace(CDLL=no_glibc))
    assert fix_mmap_threshold(65536) is False


def test_timer_measures_the_wall_time_of_its_region(monkeypatch):
    """Timer.seconds is the clock difference between entering and leaving the block."""
    clock = iter([10.0, 12.5])
    monkeypatch.setattr(probes, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    with Timer(CPU) as t:
        pass
    assert t.seconds == 2.5
