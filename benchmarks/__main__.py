"""`python -m benchmarks key=value ...` (benchmarks/cli.py). A misspelt group choice (`method=sra`)
is refused here, before the CLI imports torch and any plugin. `--methods` lists every method and option,
`--options` every key of a run's configuration.

The entry point is the one module above both the runtime and analysis (tests/test_layout.py): it
hands the launcher the cost model's pre-flight memory check (analysis/preflight.py), which
`runner.run` calls once the partition is prepared, before any rank starts."""
import sys

from benchmarks.errors import UserError
from benchmarks.registry import check_overrides


def main() -> None:
    if sys.argv[1:] == ["--methods"]:  # every method and option, from the registry (docs/methods.md)
        from benchmarks.methods_table import describe

        print(describe(), end="")
        return
    if sys.argv[1:] == ["--options"]:  # every key of the run config, from the schema (docs/options.md)
        from benchmarks.options_table import describe

        print(describe(), end="")
        return
    try:
        check_overrides(sys.argv[1:])
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    from benchmarks import rank_server
    rank_server.start()  # its imports overlap this process's own (benchmarks/rank_server.py)
    from analysis.preflight import check as preflight
    from benchmarks.cli import main as cli_main

    cli_main(preflight=preflight)


if __name__ == "__main__":
    main()
