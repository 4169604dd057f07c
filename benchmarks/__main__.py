"""`python -m benchmarks key=value ...` (benchmarks/commands/cli.py). A misspelt group choice (`method=sra`)
is refused here, before the CLI imports torch and any plugin. `--methods` lists every method and option,
`--options` every key of a run's configuration. `--check-memory` prepares the run (dataset, partition)
and prints what the pre-flight memory check says of it, instead of running it.

The entry point is the one module above both the runtime and analysis (tests/test_layout.py): it
hands the launcher the cost model's pre-flight memory check (analysis/preflight.py), which
`runner.run` calls once the partition is prepared, before any rank starts."""
import sys

from benchmarks.base.errors import UserError
from benchmarks.base.registry import check_overrides


def main() -> None:
    if sys.argv[1:] == ["--methods"]:  # every method and option, from the registry (docs/methods.md)
        from benchmarks.run.methods_table import describe

        failures = []
        print(describe(failures), end="")
        for line in failures:  # each failing plugin has its row above; the status says one failed
            print(f"error: {line}", file=sys.stderr)
        sys.exit(1 if failures else 0)
    if sys.argv[1:] == ["--options"]:  # every key of the run config, from the schema (docs/options.md)
        from benchmarks.commands.options_table import describe

        print(describe(), end="")
        return
    check_memory = "--check-memory" in sys.argv
    if check_memory:  # the check's answer alone; resume=false: an existing record is not an answer
        sys.argv = [a for a in sys.argv if a != "--check-memory"] + ["resume=false"]
    from benchmarks.run import rank_server
    try:
        check_overrides(sys.argv[1:])
        rank_server.start()  # its imports overlap this process's own (benchmarks/run/rank_server.py)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    from benchmarks.commands.cli import main as cli_main

    check, check_only = preflight_checks()
    cli_main(preflight=check_only if check_memory else check)


def preflight_checks():
    """(the pre-flight memory check a run passes before its ranks start, the check alone that
    `--check-memory` prints): the cost model's, from analysis/, which the runtime does not import."""
    from analysis.preflight import check, check_only

    return check, check_only


if __name__ == "__main__":
    main()
