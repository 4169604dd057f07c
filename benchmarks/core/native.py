"""The `native` kernels: CSR products, multi-head attention products and dropout written for the CPU
(benchmarks/core/native.c), built on first use by the machine's C compiler and loaded through ctypes.

Why C through ctypes, and not a torch C++ extension or a JIT such as numba: the file needs no Python or
torch headers, so it compiles in about a second with any C compiler and adds no dependency; torch's
extension loader needs ninja and compiles torch's headers for a minute; numba is a large dependency whose
compile cost each process pays again. Threads are pthreads started per call (native.c says why).

Nothing here is a build step: the library is compiled on first use into a per-user cache
(`GNNBENCH_NATIVE_CACHE`, default ~/.cache/gnnbench/native), keyed by the source, the compiler (`CC`,
split as a shell would: `CC="ccache gcc"`; else cc or gcc), its version, the flags and the CPU, and
shared by every later process. A sha256 written beside the library when it is built is checked before
the library is loaded (a library altered or cut short is rebuilt, said in one line, never mapped), and
a small product against torch's at load refuses a library that computes wrongly. Compiler runs have a
process group of their own, killed whole on a timeout. Where the library cannot be built or used (no
compiler, a failed build, a compiler that hangs) or is switched off (`GNNBENCH_NATIVE=off`),
`unavailable()` says why, child processes inherit the answer (`DECIDED`), and runs fall back to
`kernel=spmm` with one line (`resolve`). The wrappers take fp32 CPU tensors; callers check `usable` first and use
torch's kernels for anything else (fp64 in gradcheck, CUDA).
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import math
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("native.c")
FLAGS = ["-O3", "-march=native", "-shared", "-fPIC", "-std=c11", "-pthread"]
#: Part of the cache key: a library cached by a version of this file that wrote no checksum is not looked for.
CACHE_FORMAT = "2: checksum beside the library"
#: Seconds a compiler may take to say its version, and to build native.c.
PROBE_TIMEOUT, BUILD_TIMEOUT = 30, 300
_c_i64, _c_int, _c_u32, _c_float, _ptr = ctypes.c_int64, ctypes.c_int, ctypes.c_uint32, ctypes.c_float, ctypes.c_void_p
SIGNATURES = {
    "gnn_spmm": [_ptr, _ptr, _ptr, _ptr, _ptr, _c_i64, _c_i64, _c_int],
    "gnn_head_spmm": [_ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _c_i64, _c_i64, _c_i64, _c_int],
    "gnn_head_sddmm": [_ptr, _ptr, _ptr, _ptr, _ptr, _c_i64, _c_i64, _c_i64, _c_int],
    "gnn_dropout_rows": [_ptr, _ptr, _ptr, _c_i64, _c_i64, _c_u32, _c_u32, _c_u32, _c_float, _c_int],
    "gnn_element_hash": [_ptr, _ptr, _c_i64, _c_u32, _c_u32, _c_int],
    "gnn_edge_softmax": [_ptr, _ptr, _ptr, _ptr, _ptr, _c_i64, _c_i64, _c_float, _c_int],
    "gnn_edge_softmax_backward": [_ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _c_i64, _c_i64, _c_float, _c_int],
    "gnn_gather_sum": [_ptr, _ptr, _ptr, _ptr, _c_i64, _c_i64, _c_int],
}


def _cache_dir() -> Path:
    return Path(os.environ.get("GNNBENCH_NATIVE_CACHE") or Path.home() / ".cache" / "gnnbench" / "native")


def _cpu() -> str:
    """What -march=native compiles for: the CPU's model and flags (a shared home folder may be read by
    another kind of machine)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
        return "\n".join(sorted({line for line in text.splitlines() if line.startswith(("model name", "flags"))}))
    except OSError:
        return platform.processor() or platform.machine()


def _compiler() -> tuple[list[str] | None, str]:
    """The C compiler's command line and how to name it: `CC` split as a shell splits it (`CC="ccache gcc"`,
    `CC="gcc -O2"`, as make takes them), else cc or gcc on PATH; None where there is none."""
    cc = os.environ.get("CC", "").strip()
    if not cc:
        found = shutil.which("cc") or shutil.which("gcc")
        return ([found] if found else None), found or "cc, gcc"
    try:
        argv = shlex.split(cc)
    except ValueError as e:
        return None, f"CC={cc!r}: {e}"
    return (argv if argv and shutil.which(argv[0]) else None), cc


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    """argv in a process group of its own, the whole group killed if it outlasts `timeout` (or this
    process is interrupted meanwhile): a compiler is often a wrapper (ccache, a script) whose children
    would outlive a kill of the wrapper alone."""
    with subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, start_new_session=True) as child:
        try:
            out, err = child.communicate(timeout=timeout)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            raise  # Popen's exit closes the pipes and reaps the child
    return subprocess.CompletedProcess(argv, child.returncode, out, err)


def _checksum_file(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _unsound(path: Path) -> str | None:
    """Why the cached library at `path` may not be loaded (None: it matches the checksum written beside it
    when it was built). Checked before dlopen, so a truncated or altered file is never mapped: a mapped
    file cut short kills the process with SIGBUS where the loader reads past its end."""
    try:
        expected = _checksum_file(path).read_text().split()[0]
    except (OSError, IndexError):
        return "it has no checksum beside it"
    return None if _sha256(path) == expected else "it fails its checksum"


def _compile(compiler: list[str], path: Path) -> str | None:
    """Build native.c into `path` with its checksum beside it; why not, or None. Built aside and renamed
    into place, checksum first: a reader (another rank, a concurrent build) then finds a checksum with no
    library (and builds it too) or a library with its own checksum, never a library without one; the
    build is deterministic (the key fixes the source, compiler and flags), so any two builders' files
    and checksums agree."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        out, checksum = Path(tmp) / path.name, Path(tmp) / _checksum_file(path).name
        done = _run([*compiler, *FLAGS, "-o", str(out), str(SOURCE)], BUILD_TIMEOUT)
        if done.returncode != 0:
            first = (done.stderr.strip().splitlines() or ["no message"])[0]
            return f"{shlex.join(compiler)} failed to build {SOURCE.name}: {first}"
        checksum.write_text(f"{_sha256(out)}  {path.name}\n")  # sha256sum's format: `sha256sum -c` reads it
        os.replace(checksum, _checksum_file(path))
        os.replace(out, path)
    return None


def _self_test(lib: ctypes.CDLL) -> str | None:
    """A small product through gnn_spmm against torch's (gather, scale, index_add), at a width that takes
    each of its paths (the widest register tile, the 64-column tile, the scalar tail) on two threads: a
    library that loads but computes wrongly (a miscompile, an altered file with a matching checksum) is
    refused. Torch runs it on one thread: a parallel op would start OpenMP's thread pool in the process
    that loads the library, a sweep's parent, whose forked runs would then hang in their first parallel op
    (libgomp's pool does not survive a fork)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _compare_with_torch(lib)
    finally:
        torch.set_num_threads(threads)


def _compare_with_torch(lib: ctypes.CDLL) -> str | None:
    g = torch.Generator().manual_seed(0)
    rows, cols, width = 16, 24, 16 * 16 + 64 + 3
    counts = torch.randint(0, 6, (rows,), generator=g)
    counts[3] = 0  # a row without edges
    indptr = torch.cat([torch.zeros(1, dtype=torch.int32), torch.cumsum(counts, 0).int()])
    indices = torch.randint(0, cols, (int(indptr[-1]),), generator=g, dtype=torch.int32)
    values, x = torch.rand(indices.numel(), generator=g), torch.randn(cols, width, generator=g)
    out = torch.full((rows, width), float("nan"))
    lib.gnn_spmm(_p(indptr), _p(indices), _p(values), _p(x), _p(out), rows, width, 2)
    edge_rows = torch.repeat_interleave(torch.arange(rows), counts)
    expected = torch.zeros(rows, width).index_add_(0, edge_rows, values[:, None] * x[indices.long()])
    if torch.allclose(out, expected, rtol=1e-5, atol=1e-5):
        return None
    return f"its gnn_spmm differs from torch's by up to {(out - expected).abs().nan_to_num(float('inf')).max():.3g}"


def _load(path: Path) -> tuple[ctypes.CDLL | None, str | None]:
    try:
        lib = ctypes.CDLL(str(path))
        for name, args in SIGNATURES.items():
            getattr(lib, name).argtypes, getattr(lib, name).restype = args, None
    except (OSError, AttributeError) as e:
        return None, f"could not load the library built from {SOURCE.name}: {e}"  # e names the file
    why = _self_test(lib)
    return (None, f"{path} fails its self-test ({why})") if why else (lib, None)


def _build() -> tuple[ctypes.CDLL | None, str | None]:
    if os.environ.get("GNNBENCH_NATIVE", "").lower() in ("0", "off", "false", "no"):
        return None, "switched off (GNNBENCH_NATIVE=off)"
    compiler, name = _compiler()
    if compiler is None:
        return None, f"no C compiler found ({name})"
    try:
        version = _run([*compiler, "--version"], PROBE_TIMEOUT).stdout
        key = hashlib.sha256("\0".join([CACHE_FORMAT, SOURCE.read_text(), shlex.join(compiler), version, *FLAGS,
                                        _cpu()]).encode()).hexdigest()
        path = _cache_dir() / f"native-{key[:16]}.so"
        problem = _unsound(path) if path.exists() else "not built"
        if problem is not None:
            if path.exists():  # said like a damaged partition cache: once, by the process that rebuilds it
                print(f"native kernel library {path} is damaged ({problem}); rebuilding it", file=sys.stderr,
                      flush=True)
            why = _compile(compiler, path)
            if why is None and (problem := _unsound(path)) is not None:  # altered since this process built it
                why = f"{path} was built but {problem}"
            if why is not None:
                return None, why
        return _load(path)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"could not build or load {SOURCE.name}: {e}"


#: Why the library cannot be used, as the first process of a process tree found it (`inputs:why`), for
#: the processes it starts (a sweep's runs, a run's ranks, which inherit its environment) to take
#: instead of asking again: a compiler that hangs costs its timeout once, in the launcher, not again
#: in every rank. Tagged with what the answer depends on, so a child given another CC, PATH or cache
#: folder decides afresh. A library that works is not passed on: each process checks it (milliseconds).
DECIDED = "GNNBENCH_NATIVE_UNAVAILABLE"


def _inputs() -> str:
    said = "\0".join([*(os.environ.get(k, "") for k in ("GNNBENCH_NATIVE", "CC", "PATH")), str(_cache_dir())])
    return hashlib.sha256(said.encode()).hexdigest()[:16]


@lru_cache(maxsize=None)
def _library() -> tuple[ctypes.CDLL | None, str | None]:
    inputs = _inputs()
    tag, _, why = os.environ.get(DECIDED, "").partition(":")
    if tag == inputs and why:
        return None, why
    lib, why = _build()
    if why is not None:
        os.environ[DECIDED] = f"{inputs}:{why}"
    return lib, why


def unavailable() -> str | None:
    """Why the native kernels cannot run in this process, or None when they can (built on first call)."""
    return _library()[1]


#: Set once the fallback line is said, and inherited by child processes (a sweep's runs, their ranks,
#: a test session's commands): the line is said once per process tree, not once per run.
SAID = "GNNBENCH_NATIVE_FALLBACK_SAID"


def resolve(kernel: str, device: str, log=None) -> str:
    """The kernel a run asking for `kernel` runs on this machine: `native` where it can, else `spmm`,
    said in one line (to `log`, default stderr) unless this process or its parent said it already."""
    if kernel != "native":
        return kernel
    why = "it is a CPU kernel and device=cuda" if device == "cuda" else unavailable()
    if why is None:
        return kernel
    if os.environ.get(SAID) != "1":
        os.environ[SAID] = "1"
        (log or (lambda text: print(text, file=sys.stderr, flush=True)))(
            f"kernel=native is unavailable ({why}); running kernel=spmm, torch's CSR kernels (same results, slower)")
    return "spmm"


def usable(*tensors: torch.Tensor) -> bool:
    """Whether these tensors can go through the native kernels: fp32, on the CPU, library built."""
    return all(t.dtype == torch.float32 and t.device.type == "cpu" for t in tensors) and _library()[0] is not None


def _p(t: torch.Tensor | None):
    return None if t is None else ctypes.c_void_p(t.data_ptr())


#: Below this many multiply-adds a call runs on one thread: starting a thread costs tens of
#: microseconds, more than a small graph's (Cora's) whole product.
SMALL = 1 << 18


def _threads(work: int) -> int:
    return 1 if work < SMALL else torch.get_num_threads()


def spmm(indptr: torch.Tensor, indices: torch.Tensor, values: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """A @ x for A in CSR (int32 indptr and indices, fp32 values); x is [num_cols, ...], the result
    [num_rows, ...]."""
    x = x.contiguous()
    rows, width = indptr.numel() - 1, math.prod(x.shape[1:])
    out = x.new_empty((rows, *x.shape[1:]))
    _library()[0].gnn_spmm(_p(indptr), _p(indices), _p(values), _p(x), _p(out), rows, width,
                           _threads(indices.numel() * width))
    return out


def head_spmm(indptr, indices, alpha: torch.Tensor, z: torch.Tensor, perm: torch.Tensor | None = None):
    """out[v, h] = sum over the CSR's entries e of row v of alpha[perm[e], h] z[col_e, h]; z is
    [num_cols, H, C], alpha [nnz, H], perm (int32) maps CSR position to alpha's row (None: itself)."""
    z, alpha = z.contiguous(), alpha.contiguous()
    rows, heads, channels = indptr.numel() - 1, z.shape[1], z.shape[2]
    out = z.new_empty((rows, heads, channels))
    _library()[0].gnn_head_spmm(_p(indptr), _p(indices), _p(perm), _p(alpha), _p(z), _p(out), rows, heads, channels,
                                _threads(indices.numel() * heads * channels))
    return out


def head_sddmm(indptr, indices, g: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """out[e, h] = g[v, h] . z[col_e, h] for every CSR entry e of row v; [nnz, H]."""
    g, z = g.contiguous(), z.contiguous()
    rows, heads, channels = indptr.numel() - 1, z.shape[1], z.shape[2]
    out = z.new_empty((indices.numel(), heads))
    _library()[0].gnn_head_sddmm(_p(indptr), _p(indices), _p(g), _p(z), _p(out), rows, heads, channels,
                                 _threads(indices.numel() * heads * channels))
    return out


def edge_softmax(indptr, indices, el: torch.Tensor, er: torch.Tensor, slope: float) -> torch.Tensor:
    """GAT's edge softmax: alpha[e, h] = softmax over row v's entries of LeakyReLU(el[col_e, h] + er[v, h]);
    el [num_cols, H], er [num_rows, H], alpha [nnz, H]."""
    el, er = el.contiguous(), er.contiguous()
    alpha = el.new_empty((indices.numel(), el.shape[1]))
    _library()[0].gnn_edge_softmax(_p(indptr), _p(indices), _p(el), _p(er), _p(alpha), indptr.numel() - 1,
                                   el.shape[1], slope, _threads(alpha.numel()))
    return alpha


def edge_softmax_backward(indptr, indices, el, er, alpha, dalpha, slope: float):
    """(gradient of the logits before LeakyReLU [nnz, H], er's gradient [num_rows, H]) given alpha's."""
    dalpha = dalpha.contiguous()
    dx, der = torch.empty_like(alpha), er.new_empty(er.shape)
    _library()[0].gnn_edge_softmax_backward(_p(indptr), _p(indices), _p(el), _p(er), _p(alpha), _p(dalpha), _p(dx),
                                            _p(der), indptr.numel() - 1, el.shape[1], slope, _threads(alpha.numel()))
    return dx, der


def gather_sum(indptr, perm, values: torch.Tensor) -> torch.Tensor:
    """out[r, h] = sum over the CSR's entries e of row r of values[perm[e], h]; [num_rows, H]."""
    values = values.contiguous()
    out = values.new_empty((indptr.numel() - 1, values.shape[1]))
    _library()[0].gnn_gather_sum(_p(indptr), _p(perm), _p(values), _p(out), indptr.numel() - 1, values.shape[1],
                                 _threads(perm.numel() * values.shape[1]))
    return out


def _threshold(p: float) -> int:
    return min(int(p * 2 ** 32), 2 ** 32 - 1)


def hashes_usable(i: torch.Tensor) -> bool:
    """Whether `element_hash` can take these element indices: int64, on the CPU, library built."""
    return i.dtype == torch.int64 and i.device.type == "cpu" and _library()[0] is not None


def element_hash(i: torch.Tensor, key: int) -> torch.Tensor:
    """draws.element_hash's value per element index (int64 >= 0), through native.c's `dropout_hash`."""
    i = i.contiguous()
    out = torch.empty_like(i)
    _library()[0].gnn_element_hash(_p(i), _p(out), i.numel(), key & 0xFFFFFFFF, (key >> 32) & 0xFFFFFFFF,
                                   _threads(i.numel() * 16))  # a hash: about 16 integer operations
    return out


def dropout_rows(x: torch.Tensor, p: float, key: int, ids: torch.Tensor) -> torch.Tensor:
    """x [rows, width] with node-keyed masks: element (r, c) kept (scaled by 1/(1-p)) when
    hash(key, ids[r] * width + c) >= p 2^32 (`draws.element_hash` is the same function in torch)."""
    x, ids = x.contiguous(), ids.to(torch.int64).contiguous()
    out = torch.empty_like(x)
    rows, width = x.shape[0], (x.numel() // x.shape[0] if x.shape[0] else 0)
    _library()[0].gnn_dropout_rows(_p(x), _p(out), _p(ids), rows, width, key & 0xFFFFFFFF, (key >> 32) & 0xFFFFFFFF,
                                   _threshold(p), 1.0 / (1.0 - p), _threads(x.numel()))
    return out
