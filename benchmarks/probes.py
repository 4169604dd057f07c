"""Memory and time probes (measurement guide §1, §2, §4).

Host memory: VmHWM/VmRSS from /proc/self/status; the peak is reset by writing 5 to
/proc/self/clear_refs at the start of each training segment, so `train_peak - rss_at_train_start`
is the training working set. Evaluation runs between segments and is excluded. CUDA: allocator
peaks after reset_peak_memory_stats.
"""
from __future__ import annotations

import ctypes
import gc
import time

import torch


def fix_mmap_threshold(threshold_bytes) -> bool:
    """Make RSS follow live tensors. glibc raises its mmap threshold after every large free (up to
    32 MiB), so freed activations stay in the heap and in RSS, and VmHWM then measures the allocator's
    retention rather than the method. A fixed threshold (mallopt M_MMAP_THRESHOLD, which also turns
    the dynamic adjustment off) returns every large free to the OS. Costs some page faults (~10 %
    epoch time here). None keeps glibc's default. Returns whether it was applied."""
    if threshold_bytes is None:
        return False
    try:
        return bool(ctypes.CDLL("libc.so.6").mallopt(-3, int(threshold_bytes)))  # -3: M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        return False


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def rss_bytes() -> int:
    return _status_kb("VmRSS") * 1024


def hwm_bytes() -> int:
    return _status_kb("VmHWM") * 1024


def reset_hwm() -> bool:
    """Reset VmHWM to the current RSS; False where /proc/self/clear_refs is not writable."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class MemoryProbe:
    """Tracks peak RSS over training segments (evaluation excluded) on one rank."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self.peak_before_train = hwm_bytes()  # loading, setup
        self.train_peak = 0
        self.other_peak = self.peak_before_train
        self.rss_train_start = 0
        self.hwm_resettable = True
        self.cuda_peaks = {"allocated": 0, "reserved": 0}

    def start_training(self) -> None:
        gc.collect()
        self.hwm_resettable = reset_hwm()
        self.rss_train_start = rss_bytes()
        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.cuda_static = torch.cuda.memory_allocated(self.device)

    def pause(self) -> None:
        """End a training segment (before evaluation)."""
        self.train_peak = max(self.train_peak, hwm_bytes())
        reset_hwm()
        if self.cuda:
            torch.cuda.synchronize(self.device)
            self.cuda_peaks["allocated"] = max(self.cuda_peaks["allocated"], torch.cuda.max_memory_allocated(self.device))
            self.cuda_peaks["reserved"] = max(self.cuda_peaks["reserved"], torch.cuda.max_memory_reserved(self.device))

    def resume(self) -> None:
        """Start the next training segment (after evaluation)."""
        self.other_peak = max(self.other_peak, hwm_bytes())
        reset_hwm()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)

    def result(self) -> dict:
        out = {
            "peak_rss_bytes": max(self.other_peak, self.train_peak, hwm_bytes()),
            "rss_train_start_bytes": self.rss_train_start,
            "train_peak_rss_bytes": self.train_peak,
            "train_mem_delta_bytes": max(0, self.train_peak - self.rss_train_start),
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
