"""`python -m benchmarks.tools.launch_counts <overrides>`: how often the launcher process of one
`python -m benchmarks <overrides>` run calls what a run should do once (Hydra's compose, the schema's
checks, `RunConfig.as_dict`, the registry's lookups), counted by code object (`sys.setprofile`) and
its qualified name (an options class's own `check` method, in the same file, is not `config.check`),
so a function imported by name elsewhere is counted too. The run itself runs as usual (it writes its
record); the counts are printed last, on stderr."""
from __future__ import annotations

import atexit
import collections
import runpy
import sys
import threading

#: (path suffix, qualified function name) -> the label printed.
WATCHED = {("benchmarks/run/config.py", "check"): "config.check",
           ("benchmarks/base/options.py", "validate"): "options.validate",
           ("benchmarks/run/config.py", "RunConfig.as_dict"): "RunConfig.as_dict",
           ("benchmarks/base/registry.py", "aliases"): "registry.aliases",
           ("benchmarks/base/registry.py", "plugin_path"): "registry.plugin_path",
           ("hydra/_internal/config_loader_impl.py", "ConfigLoaderImpl.load_configuration"): "Hydra composes"}


def main() -> None:
    counts = collections.Counter()

    def profile(frame, event, arg):
        if event == "call":
            code = frame.f_code
            for (path, name), label in WATCHED.items():
                if code.co_qualname == name and code.co_filename.endswith(path):
                    counts[label] += 1

    sys.setprofile(profile)
    threading.setprofile(profile)
    atexit.register(lambda: print("launcher counts: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
                                  file=sys.stderr))
    sys.argv = ["benchmarks", *sys.argv[1:]]
    runpy.run_module("benchmarks", run_name="__main__")


if __name__ == "__main__":
    main()
