"""Memory and time probes (docs/measurement.md, "Time" and "Memory").

Host memory: VmHWM/VmRSS from /proc/self/status; the peak is reset by writing 5 to
/proc/self/clear_refs at the start of each training segment, so `train_peak - rss_at_train_start`
is the training working set. Evaluation runs between segments and is excluded. Beside each peak,
its PSS (shared pages split between the processes that map them, /proc/self/smaps_rollup). CUDA:
allocator peaks after reset_peak_memory_stats. The process's peak over the whole run (its warm-up
peak and every epoch and evaluation after it) is read once more at the end: what the machine must
hold (the pre-flight memory check is validated on it).

Memory and time are measured in different epochs, so neither distorts the other: the memory probe
runs during the warm-up epochs (the ones dropped from the epoch-time median) with a fixed, small
mmap threshold, so that RSS follows live tensors; then the allocator is switched to glibc's steady
state for the timed epochs and the probe stops (docs/measurement.md, "Allocator").
"""
from __future__ import annotations

import ctypes
import gc
import os
import statistics
import time

import torch

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)
# Where glibc's dynamic thresholds settle once large blocks have been freed: the mmap threshold at
# its 32 MiB ceiling (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit) and the trim threshold at twice it.
TIMED_MMAP_THRESHOLD, TIMED_TRIM_THRESHOLD = 32 << 20, 64 << 20


def cores() -> int:
    """Cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _mallopt(param: int, value: int) -> bool:
    try:
        return bool(ctypes.CDLL("libc.so.6").mallopt(param, int(value)))
    except (OSError, AttributeError):
        return False


def fix_mmap_threshold(threshold_bytes) -> bool:
    """Make RSS follow live tensors. glibc raises its mmap threshold after every large free (up to
    32 MiB), so freed activations stay in the heap and in RSS, and VmHWM then measures the allocator's
    retention rather than the method. A fixed threshold (mallopt M_MMAP_THRESHOLD, which also turns
    the dynamic adjustment off) returns every large free to the OS, at the price of page faults
    (10-20 % epoch time on CPU), which is why only the memory-probe epochs run with it. None keeps
    glibc's default. Returns whether it was applied."""
    if threshold_bytes is None:
        return False
    return _mallopt(M_MMAP_THRESHOLD, threshold_bytes)


def timed_allocator() -> bool:
    """After the memory probe: the thresholds glibc's own adjustment would have reached, so timed
    epochs pay no page-fault tax (once fixed, the dynamic adjustment cannot be turned back on)."""
    return _mallopt(M_MMAP_THRESHOLD, TIMED_MMAP_THRESHOLD) and _mallopt(M_TRIM_THRESHOLD, TIMED_TRIM_THRESHOLD)


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def rss_bytes() -> int:
    return _status_kb("VmRSS") * 1024


def library_rss_bytes() -> int:
    """The part of RSS in shared libraries' mappings (`*.so*` in /proc/self/smaps: torch's, gloo's,
    Python extensions'), mostly code faulted in on a kernel's first call and shared with every process
    that maps it. Not other mapped files: a memory-mapped graph is data. One read walks every mapping
    (about 10 ms for a torch process), so only the probe's segment ends read it; 0 where the kernel
    has no smaps."""
    total, library = 0, False
    try:
        with open("/proc/self/smaps") as f:
            for line in f:
                head = line.split(" ", 1)[0]
                if "-" in head and ":" not in head:  # a mapping's first line: range perms offset dev inode path
                    fields = line.split()
                    library = len(fields) > 5 and ".so" in fields[5].rsplit("/", 1)[-1]
                elif library and line.startswith("Rss:"):
                    total += int(line.split()[1]) * 1024
    except OSError:
        return 0
    return total


def hwm_bytes() -> int:
    return _status_kb("VmHWM") * 1024


def shared_excess_bytes() -> int | None:
    """RSS less PSS (both from /proc/self/smaps_rollup, read together): what RSS counts beyond this
    process's share of the pages it shares with others (a memory-mapped graph, shared memory, pages
    inherited from the forkserver). None where the kernel has no smaps_rollup (Linux < 4.14, not
    Linux). One read walks the page tables: ~12 ms at 0.4 GiB RSS, so only the probe's segment ends
    read it."""
    try:
        with open("/proc/self/smaps_rollup") as f:
            kb = dict(line.split()[:2] for line in f if line.startswith(("Rss:", "Pss:")))
        return (int(kb["Rss:"]) - int(kb["Pss:"])) * 1024
    except (OSError, KeyError, ValueError):
        return None


def reset_hwm() -> bool:
    """Reset VmHWM to the current RSS; False where /proc/self/clear_refs is not writable."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _all_or_none(reduce):
    """`reduce` over the ranks' values; None where a rank has none."""
    def over(values):
        values = list(values)
        return None if None in values else reduce(values)
    return over


class MemoryProbe:
    """Tracks peak RSS over training segments (evaluation excluded) on one rank, during the first
    `probe_epochs` epochs; `epoch_done` ends the probe after them and, when the run fixed the mmap
    threshold for it, hands the timed epochs the allocator's steady state.

    PSS has no high-water mark, so the peak's PSS is each peak read less what RSS counts beyond this
    rank's share of its shared pages at that moment (`shared_excess_bytes`); shared pages (mapped
    files, shared memory) stay mapped while training allocates and frees private ones."""

    DESCRIPTION = ("VmHWM reset via /proc/self/clear_refs at each training segment of the warm-up epochs "
                   "(malloc_mmap_threshold fixed there; timed epochs run with glibc's steady-state thresholds); "
                   "peak PSS = each VmHWM read less RSS - PSS from /proc/self/smaps_rollup then; the data "
                   "working set = the training delta less the shared libraries' RSS those segments added")
    #: What the per-rank results contribute to a record's summary: key -> (per-rank field, reduction).
    SUMMARY = {"peak_rss_bytes_max": ("peak_rss_bytes", max),
               "peak_pss_bytes_max": ("peak_pss_bytes", _all_or_none(max)),
               "peak_pss_bytes_sum": ("peak_pss_bytes", _all_or_none(sum)),
               "process_peak_rss_bytes_max": ("process_peak_rss_bytes", max),
               "process_peak_pss_bytes_max": ("process_peak_pss_bytes", _all_or_none(max)),
               "process_peak_pss_bytes_sum": ("process_peak_pss_bytes", _all_or_none(sum)),
               "train_mem_delta_bytes_max": ("train_mem_delta_bytes", max),
               "train_mem_delta_bytes_mean": ("train_mem_delta_bytes", statistics.fmean),
               "train_data_delta_bytes_max": ("train_data_delta_bytes", max)}

    def __init__(self, device: torch.device, probe_epochs: int | None = None, switch_allocator: bool = False):
        self.device = device
        self.cuda = device.type == "cuda"
        self.probe_epochs, self.switch_allocator = probe_epochs, switch_allocator
        self.probing, self.training = True, False
        self.peak_pss = 0  # None once smaps_rollup is found missing
        self.peak_before_train = self._hwm()  # loading, setup
        self.train_peak = 0
        self.other_peak = self.peak_before_train
        self.rss_train_start = 0
        # the libraries' RSS (their code) at the first training segment's start and what it had grown
        # by at the last segment's end (kernels called for the first time, not data), and the
        # training peak with the growth by each segment's end taken off (`train_data_peak`)
        self.code_train_start, self.train_code_pages, self.train_data_peak = 0, 0, 0
        self.hwm_resettable = True
        self.cuda_peaks = {"allocated": 0, "reserved": 0}

    def _hwm(self) -> int:
        """VmHWM, its PSS kept beside it (see the class)."""
        hwm, excess = hwm_bytes(), shared_excess_bytes()
        self.peak_pss = None if excess is None or self.peak_pss is None else max(self.peak_pss, hwm - excess)
        return hwm

    def start_training(self) -> None:
        gc.collect()
        self.hwm_resettable = reset_hwm()
        self.rss_train_start = rss_bytes()
        self.code_train_start = library_rss_bytes()
        self.training = True
        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.cuda_static = torch.cuda.memory_allocated(self.device)

    def pause(self) -> None:
        """End a training segment (before evaluation)."""
        if not self.probing or not self.training:
            return
        self.training = False
        hwm = self._hwm()
        self.train_peak = max(self.train_peak, hwm)
        # code pages only grow: those resident at this segment's end were, at most, all there at its peak
        self.train_code_pages = library_rss_bytes() - self.code_train_start
        self.train_data_peak = max(self.train_data_peak, hwm - self.train_code_pages)
        reset_hwm()
        if self.cuda:
            torch.cuda.synchronize(self.device)
            self.cuda_peaks["allocated"] = max(self.cuda_peaks["allocated"],
                                               torch.cuda.max_memory_allocated(self.device))
            self.cuda_peaks["reserved"] = max(self.cuda_peaks["reserved"], torch.cuda.max_memory_reserved(self.device))

    def resume(self) -> None:
        """Start the next training segment (after evaluation)."""
        if not self.probing or self.training:
            return
        self.training = True
        self.other_peak = max(self.other_peak, self._hwm())
        reset_hwm()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)

    def epoch_done(self, epoch: int) -> None:
        """After an epoch and its evaluation: the probe ends after `probe_epochs` epochs."""
        if self.probing and self.probe_epochs is not None and epoch + 1 >= self.probe_epochs:
            self.pause()
            self.other_peak = max(self.other_peak, self._hwm())
            self.probing = False
            if self.switch_allocator:
                timed_allocator()

    def result(self) -> dict:
        self.pause()
        if self.probing:
            self.other_peak = max(self.other_peak, self._hwm())
        # VmHWM since the probe's last reset: the epochs and evaluations after the probe, where the
        # timed allocator keeps freed memory; with the probe's peak, the process's peak over the run
        hwm, excess = hwm_bytes(), shared_excess_bytes()
        peak = max(self.other_peak, self.train_peak)
        out = {
            "peak_rss_bytes": peak,
            "peak_pss_bytes": self.peak_pss,
            "process_peak_rss_bytes": max(peak, hwm),
            "process_peak_pss_bytes": None if self.peak_pss is None or excess is None
            else max(self.peak_pss, hwm - excess),
            "rss_train_start_bytes": self.rss_train_start,
            "train_peak_rss_bytes": self.train_peak,
            "train_mem_delta_bytes": max(0, self.train_peak - self.rss_train_start),
            # the delta less the library code faulted in since training started (counted in full by RSS,
            # in every rank, though shared): what the cost model's working set describes. Code first
            # called after a segment's peak is taken off too, so it can read low by that much.
            "train_code_pages_bytes": self.train_code_pages,
            "train_data_delta_bytes": max(0, self.train_data_peak - self.rss_train_start),
            "hwm_resettable": self.hwm_resettable,
        }
        if self.cuda:
            stats = torch.cuda.memory_stats(self.device)
            out.update({
                "cuda_static_bytes": self.cuda_static,
                "cuda_train_max_allocated_bytes": self.cuda_peaks["allocated"],
                "cuda_train_max_reserved_bytes": self.cuda_peaks["reserved"],
                "cuda_num_alloc_retries": stats.get("num_alloc_retries", 0),
                "cuda_num_ooms": stats.get("num_ooms", 0),
            })
        return out


class Timer:
    """Wall time of a region; synchronises CUDA so queued kernels are counted."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.device = device

    def __enter__(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            torch.cuda.synchronize(self.device)
        self.seconds = time.perf_counter() - self.start
