"""The option reference (docs/options.md, `python -m benchmarks --options`) is read from the schema:
a new key, default, range or doc changes it, and the test below says to regenerate it, so the
reference cannot drift from the code. Its columns say a declaration in the words an error uses."""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Literal, Optional

import pytest

from benchmarks.core.datasets import PROJECT_ROOT
from benchmarks.base.errors import UserError
from benchmarks.base.options import Options, allowed, option, type_name, validate

pytestmark = pytest.mark.fast


def test_the_option_reference_users_read_is_the_schemas():
    from benchmarks.commands.options_table import describe

    assert (PROJECT_ROOT / "docs" / "options.md").read_text() == describe(), \
        "regenerate: python -m benchmarks --options > docs/options.md"


@dataclass(frozen=True)
class Demo(Options):
    fanouts: list[int] = option([15, 10, 5], "or -1 for all", ge=1, also=(-1,))
    delays: Optional[list[float]] = option([], ge=0, empty=True)
    mode: Literal["fast", "exact"] = option("fast")
    threshold: Optional[int] = option(65536, ge=1, lt=2 ** 31)
    share: float = option(0.5, ge=0, le=1)
    extra: Optional[dict] = option(None)


def test_each_declaration_in_words():
    hints = typing.get_type_hints(Demo)
    words = {f.name: (type_name(hints[f.name]), allowed(hints[f.name], f.metadata)) for f in dataclasses.fields(Demo)}
    assert words == {
        "fanouts": ("list of int", "a list of positive integers, or -1"),
        "delays": ("list of float or null", "a list of numbers >= 0 (may be empty), or null"),
        "mode": ("choice", "`fast`, `exact`"),
        "threshold": ("int or null", "an integer in [1, 2^31), or null"),
        "share": ("float", "a number in [0, 1]"),
        "extra": ("mapping or null", "a mapping, or null"),
    }


def test_the_reference_says_what_the_error_says():
    field = {f.name: f for f in dataclasses.fields(Demo)}["threshold"]
    with pytest.raises(UserError) as e:
        validate(Demo, {"threshold": 0})
    assert str(e.value) == f"method.threshold=0 must be {allowed(Optional[int], field.metadata)}"
