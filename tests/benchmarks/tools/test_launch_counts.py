"""One pass from command line to record (issue 39): the launcher of one run composes its config once,
holds it to the schema once (each of its six option sets validated once: the top level, method,
dataset, model, memory, comm) and builds its dictionary only where it must, counted by
`benchmarks.tools.launch_counts`. An approximation's exact control is a second configuration, checked
as its own."""
import re
import subprocess
import sys

import pytest

from benchmarks import PROJECT_ROOT
from tests.conftest import SMALL_SYNTHETIC


def counts(stderr: str) -> dict[str, int]:
    line = next(s for s in stderr.splitlines() if s.startswith("launcher counts: "))
    return {k: int(v) for k, v in re.findall(r"([\w. ]+?) (\d+)(?:, |$)", line.removeprefix("launcher counts: "))}


@pytest.mark.parametrize("method, configurations", [("full_halo", 1), ("pipegcn", 2)])
def test_a_launch_composes_once_and_checks_each_configuration_once(tmp_path, method, configurations):
    # its own interpreter, not the tests' warm parent: the counts are printed at its exit
    out = subprocess.run([sys.executable, "-m", "benchmarks.tools.launch_counts", f"method={method}", "workers=2",
                          "epochs=1", *SMALL_SYNTHETIC, f"results_dir={tmp_path}", f"cache_dir={tmp_path / 'cache'}"],
                         cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    seen = counts(out.stderr)
    assert seen["Hydra composes"] == 1
    assert seen["config.check"] == configurations
    assert seen["options.validate"] == 6 * configurations
    # the run's: the savers' check, the record's path and its config; an approximation's control adds
    # its own savers' check, the run's and its own for the comparison (config.control_config), and its
    # variant's label (runner.plan)
    assert seen["RunConfig.as_dict"] == 3 + 4 * (configurations - 1)
