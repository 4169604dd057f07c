"""The one exception type for bad input: its message is a single line that says what to do."""


class UserError(Exception):
    """Bad configuration, missing data or a damaged cache. The CLI prints the message alone,
    without a traceback, and exits with status 2."""


def choose(kind: str, name: str, valid) -> str:
    """Return `name` if it is one of `valid`, else raise the suite's standard unknown-name error."""
    valid = sorted(valid)
    if name not in valid:
        raise UserError(f"unknown {kind} '{name}'; choose one of: {', '.join(valid)}")
    return name
