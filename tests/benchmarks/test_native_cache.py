"""The native kernels' compile cache (benchmarks/core/native.py) under hostile input: a cached library
that was altered, cut short or replaced is rebuilt before it is mapped; one that loads but lacks the
kernels or computes wrongly is refused in one line; a compiler that hangs is killed with its children
and asked once per process tree; `CC` with arguments is run as a shell would split it; concurrent
first uses build one library. Each case runs in fresh interpreters, as a user's commands do, with a
cache folder of its own (not in the fast tier: a few seconds a case)."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import PROJECT_ROOT
from benchmarks.core import native

needs_compiler = pytest.mark.skipif(native.unavailable() is not None,
                                    reason=f"native kernels: {native.unavailable()}")
RESOLVE = "from benchmarks.core import native; print(native.resolve('native', 'cpu'))"


def environment(tmp_path: Path, **extra: str) -> dict:
    """This session's environment with a cache folder of the test's own, and nothing said or decided yet."""
    env = {k: v for k, v in os.environ.items() if k not in (native.SAID, native.DECIDED, "CC")}
    return {**env, "GNNBENCH_NATIVE_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(PROJECT_ROOT), **extra}


def python(code: str, env: dict, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, **kw)


def fake_compiler(tmp_path: Path, name: str, script: str) -> Path:
    """A shell script named `name` in a folder of its own, to put on PATH."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text("#!/bin/sh\n" + script)
    (folder / name).chmod(0o755)
    return folder


@pytest.fixture(scope="module")
def sound_cache(tmp_path_factory) -> Path:
    """A cache folder holding the library a first use builds (and its checksum), built once."""
    folder = tmp_path_factory.mktemp("sound")
    assert python(RESOLVE, environment(folder), check=True).stdout.split() == ["native"]
    return folder / "cache"


def built_library(tmp_path: Path, sound_cache: Path) -> Path:
    """The sound cache copied to the test's cache folder; its library."""
    shutil.copytree(sound_cache, tmp_path / "cache")
    (path,) = (tmp_path / "cache").glob("native-*.so")
    return path


def shared_library(tmp_path: Path, source: str) -> bytes:
    """`source` compiled into a shared library by this machine's compiler."""
    c, so = tmp_path / "other.c", tmp_path / "other.so"
    c.write_text(source)
    subprocess.run([shutil.which("cc") or "gcc", "-shared", "-fPIC", "-o", str(so), str(c)], check=True)
    return so.read_bytes()


def flip_a_bit(data: bytes, tmp_path) -> bytes:
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0x04]) + data[middle + 1:]


@needs_compiler
@pytest.mark.parametrize("damage", [
    flip_a_bit,  # N7, N9: an ok record with wrong losses
    lambda data, tmp_path: data[:1000],  # N3: SIGBUS as the loader reads past the end, no line, no record
    lambda data, tmp_path: shared_library(tmp_path, "int other(void) { return 1; }\n"),  # N6: AttributeError
], ids=["one-bit-flipped", "truncated", "another-library"])
def test_a_damaged_cached_library_is_rebuilt_before_it_is_loaded(tmp_path, sound_cache, damage):
    path = built_library(tmp_path, sound_cache)
    sound = path.read_bytes()
    path.write_bytes(damage(sound, tmp_path))
    done = python(RESOLVE, environment(tmp_path))
    assert done.returncode == 0 and done.stdout.split() == ["native"], done.stderr
    assert done.stderr.splitlines() == [f"native kernel library {path} is damaged (it fails its checksum); "
                                        "rebuilding it"]
    assert path.read_bytes() == sound


def fake_kernels(spmm_body: str) -> str:
    """C source defining every kernel native.py binds, doing nothing but gnn_spmm's `spmm_body`."""
    others = "".join(f"void {name}(void) {{}}\n" for name in native.SIGNATURES if name != "gnn_spmm")
    return (f"{others}void gnn_spmm(const int *indptr, const int *indices, const float *values, const float *x, "
            f"float *out, long rows, long width, int threads) {{ {spmm_body} }}\n")


@needs_compiler
@pytest.mark.parametrize("source, why", [
    (fake_kernels("for (long i = 0; i < rows * width; i++) out[i] = 0;"), "fails its self-test"),
    ("int other(void) { return 1; }\n", "undefined symbol: gnn_"),
], ids=["wrong-results", "no-kernels"])
def test_a_library_that_matches_its_checksum_but_is_wrong_is_refused_in_one_line(tmp_path, sound_cache, source,
                                                                                why):
    """Both the library and its checksum replaced: the checksum holds, the self-test (or the symbols) do not."""
    path = built_library(tmp_path, sound_cache)
    path.write_bytes(shared_library(tmp_path, source))
    path.with_name(path.name + ".sha256").write_text(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  x\n")
    done = python(RESOLVE, environment(tmp_path))
    assert done.returncode == 0 and done.stdout.split() == ["spmm"], done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("kernel=native is unavailable (") and why in line and str(path) in line, line


def alive(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie waiting for its parent to reap it does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_a_compiler_that_hangs_is_killed_with_its_children_and_asked_once_per_process_tree(tmp_path):
    """N16: the launcher's probe times out; its ranks (here a child process) inherit the answer instead
    of waiting again, and the wrapper's own children die with it. A child given another CC decides afresh."""
    marks = tmp_path / "marks"
    bin_dir = fake_compiler(tmp_path, "slowcc", f'echo "$$" >> {marks}\nsleep 100 &\necho "$!" >> {marks}\nwait\n')
    env = environment(tmp_path, CC="slowcc", PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    rank = "import subprocess, sys; subprocess.run([sys.executable, '-c', WHY], check=True)"
    code = (f"import os; from benchmarks.core import native; native.PROBE_TIMEOUT = 1\n{RESOLVE}\n"
            f"WHY = 'from benchmarks.core import native; print(native.unavailable())'\n"
            f"exec({rank!r})\nos.environ['CC'] = 'no-such-cc'\nexec({rank!r})")
    done = python(code, env, timeout=120)
    assert done.returncode == 0, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("kernel=native is unavailable (could not build or load native.c: Command") \
        and "timed out after 1 second" in line, line
    why = line.removeprefix("kernel=native is unavailable (").split("); running")[0]
    assert done.stdout.splitlines() == ["spmm", why, "no C compiler found (no-such-cc)"]
    pids = [int(pid) for pid in marks.read_text().split()]
    assert len(pids) == 2, "the compiler was asked more than once"  # the wrapper and its sleep, once
    deadline = time.monotonic() + 10
    while any(map(alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(map(alive, pids)), "the compiler's children outlived the timeout"


def test_cc_with_arguments_is_split_as_a_shell_would(tmp_path):
    """N15: `CC="gcc -O2"` (as `CC="ccache gcc"`) runs gcc with its argument, not 'no C compiler found'."""
    bin_dir = fake_compiler(tmp_path, "fakecc", 'case "$*" in *--version*) echo "fakecc 1.0"; exit 0;; esac\n'
                                                'echo "fakecc was given: $*" >&2\nexit 1\n')
    env = environment(tmp_path, CC="fakecc --an-option", PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    done = python(RESOLVE, env)
    assert done.returncode == 0 and done.stdout.split() == ["spmm"], done.stderr
    (line,) = done.stderr.splitlines()
    assert "(fakecc --an-option failed to build native.c: fakecc was given: --an-option -O3 " in line, line


@needs_compiler
def test_concurrent_first_uses_build_one_sound_library(tmp_path):
    """N1: processes starting at once in an empty cache each get a sound library (a reader finds a
    checksum without a library, or a library with its checksum), and leave one library, its checksum
    and no build folder."""
    env = environment(tmp_path)
    code = RESOLVE + "; import torch; x = torch.randn(5, 3); print(float(native.spmm(" \
        "torch.tensor([0, 2, 3], dtype=torch.int32), torch.tensor([0, 4, 1], dtype=torch.int32), " \
        "torch.ones(3), x).sum() - (x[0] + x[4] + x[1]).sum()))"
    starts = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True) for _ in range(4)]
    for p in starts:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and out.split()[0] == "native" and abs(float(out.split()[1])) < 1e-5, err
        assert not err.strip(), err
    (path,) = (tmp_path / "cache").glob("native-*.so")
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [path.name, path.name + ".sha256"]


def test_a_runs_ranks_take_the_launchers_answer_instead_of_asking_the_compiler_again(tmp_path):
    """N16 through a real two-rank run: its ranks are forked from a fork server started before the
    launcher asked, so the answer travels with each rank (`runner._launcher_environ`), not by inheritance.
    A compiler that fails (cheaper to wait for than one that hangs) is run by the launcher alone."""
    calls = tmp_path / "calls"
    bin_dir = fake_compiler(tmp_path, "countcc", f'echo "$*" >> {calls}\necho "countcc cannot" >&2\nexit 1\n')
    env = environment(tmp_path, CC="countcc", PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run([sys.executable, "-m", "benchmarks", "method=full_halo", "workers=2", "dataset.nodes=200",
                           "epochs=1", f"cache_dir={tmp_path / 'data'}", f"results_dir={tmp_path / 'results'}"],
                          env=env, capture_output=True, text=True, timeout=300, cwd=PROJECT_ROOT)
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "kernel=native is unavailable (countcc failed to build native.c: countcc cannot)" \
        in said, said
    asked = calls.read_text().splitlines()
    assert len(asked) == 2 and asked[0] == "--version", asked  # the launcher's version probe and build, only


FORK_AFTER_LOAD = """
import os, torch
torch.set_num_threads(2)
from benchmarks.core import native
before = len(os.listdir('/proc/self/task'))
assert native.resolve('native', 'cpu') == 'native'
after = len(os.listdir('/proc/self/task'))
pid = os.fork()
if pid == 0:  # a sweep's forked run: its first parallel op
    torch.repeat_interleave(torch.arange(200000), 2).sum()
    os._exit(0)
print(before, after, os.waitpid(pid, 0)[1])
"""


@needs_compiler
@pytest.mark.parametrize("cache", ["fresh", "built"])
def test_loading_the_library_starts_no_thread_pool_that_a_forked_run_would_hang_on(tmp_path, sound_cache, cache):
    """A sweep's parent loads the library (and self-tests it) before it forks each run: had the test started
    OpenMP's thread pool there, the forked run would hang in its first parallel op (make run did, at run 1)."""
    if cache == "built":
        built_library(tmp_path, sound_cache)
    out = python(FORK_AFTER_LOAD, environment(tmp_path), timeout=120)
    assert out.returncode == 0, out.stderr
    before, after, status = out.stdout.split()
    assert before == after and status == "0"
