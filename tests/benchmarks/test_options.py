"""The options validator on its own: types, ranges, choices, null, lists, unknown keys, the
cross-option hook, and one-line messages; no process, no Hydra."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar, Literal, Optional

import pytest

from benchmarks.base.errors import UserError
from benchmarks.base.options import Options, as_dict, defaults, option, validate

pytestmark = pytest.mark.fast


@dataclass(frozen=True)
class Demo(Options):
    steps: int = option(10, "steps between refreshes", ge=1)
    depth: int = option(0, ge=0)
    rate: float = option(0.5, "a rate", ge=0)
    lr: Optional[float] = option(None, "null: the training lr", gt=0)
    every: Optional[int] = option(None, "local steps", ge=1)
    fast: bool = option(False)
    label: str = option("a")
    mode: Literal["sar", "sa", "one_shot"] = option("sar")
    fanouts: list[int] = option([15, 10, 5], "or -1 for all", ge=1, also=(-1,))
    prefetch: int = option(1, ge=0, message="method.prefetch must be a non-negative integer (got {value!r})")

    def check(self, cfg: dict) -> None:
        if self.depth > self.steps:
            raise UserError(f"method.depth={self.depth} exceeds method.steps={self.steps}")
        if cfg and len(self.fanouts) not in (1, cfg["layers"]):
            raise UserError(f"method.fanouts has {len(self.fanouts)} entries but layers={cfg['layers']}")


def check(values: dict, cfg: dict | None = None) -> Demo:
    return validate(Demo, {"name": "demo", **values}, cfg)


def test_defaults_fill_what_is_missing_and_values_are_kept_as_given():
    options = check({"rate": 2, "fanouts": [4, -1]})
    assert options.rate == 2 and isinstance(options.rate, int)  # an int is a number; no conversion
    assert as_dict(options) == {**defaults(Demo), "rate": 2, "fanouts": [4, -1]}
    assert defaults(Demo)["fanouts"] == [15, 10, 5] and Demo().fanouts is not Demo().fanouts
    # name and an alias's plugin are not options
    assert validate(Demo, {"name": "ggs", "plugin": "demo"}) == Demo()


@pytest.mark.parametrize("values, message", [
    ({"steps": 0}, "method.steps=0 must be a positive integer (steps between refreshes)"),
    ({"steps": "x"}, "method.steps='x' must be a positive integer"),
    ({"steps": True}, "method.steps=True must be a positive integer"),  # a bool is not an int here
    ({"steps": 2.0}, "method.steps=2.0 must be a positive integer"),
    ({"steps": None}, "method.steps=None must be a positive integer"),  # not Optional: null is wrong
    ({"depth": -2}, "method.depth=-2 must be a non-negative integer"),
    ({"rate": -1}, "method.rate=-1 must be a number >= 0 (a rate)"),
    ({"rate": float("nan")}, "method.rate=nan must be a number >= 0"),
    ({"rate": False}, "method.rate=False must be a number >= 0"),
    ({"lr": 0}, "method.lr=0 must be a positive number, or null (null: the training lr)"),
    ({"every": 0}, "method.every=0 must be a positive integer, or null (local steps)"),
    ({"fast": "maybe"}, "method.fast='maybe' must be true or false"),
    ({"fast": 1}, "method.fast=1 must be true or false"),
    ({"label": 3}, "method.label=3 must be a string"),
    ({"mode": "sra"}, "unknown method.mode 'sra'; choose one of: one_shot, sa, sar"),
    ({"fanouts": [10, 0, 5]}, "method.fanouts=[10, 0, 5] must be a list of positive integers (or -1 for all)"),
    ({"fanouts": []}, "method.fanouts=[] must be a list of positive integers"),
    ({"fanouts": 10}, "method.fanouts=10 must be a list of positive integers"),
    ({"fanouts": [True]}, "method.fanouts=[True] must be a list of positive integers"),
    ({"prefetch": -1}, "method.prefetch must be a non-negative integer (got -1)"),
    ({"depth": 11}, "method.depth=11 exceeds method.steps=10"),
    ({"stepz": 1}, "unknown option method.stepz for method=demo; its options are: depth, every, fanouts, fast, "
                   "label, lr, mode, prefetch, rate, steps"),
    ({"a": 1, "b": 2}, "unknown options method.a, method.b for method=demo"),
])
def test_bad_values_are_one_line_errors_naming_the_option(values, message):
    with pytest.raises(UserError, match=re.escape(message)) as e:
        check(values)
    assert len(str(e.value).splitlines()) == 1


def test_null_is_allowed_where_optional_and_the_hook_sees_the_run_config():
    assert check({"lr": None, "every": None}).lr is None
    assert check({"fanouts": [5]}, {"layers": 3}).fanouts == [5]
    with pytest.raises(UserError, match="method.fanouts has 2 entries but layers=3"):
        check({"fanouts": [5, 5]}, {"layers": 3})


def test_a_method_without_options_takes_none():
    assert validate(Options, {"name": "full_halo"}) == Options()
    with pytest.raises(UserError, match=r"^unknown option method.mode for method=full_halo; it takes none$"):
        validate(Options, {"name": "full_halo", "mode": "sar"})


@dataclass(frozen=True)
class Section(Options):
    """A non-method section: upper bounds, lists that may be empty, mappings, its own reserved keys."""

    reserved: ClassVar[tuple[str, ...]] = ("name",)

    share: float = option(0.5, "a share", ge=0, le=1)
    below: float = option(0.0, ge=0, lt=1)
    at_most: int = option(3, le=10)
    delays: list[float] = option([], ge=0, empty=True)
    extra: Optional[dict] = option(None)


@pytest.mark.parametrize("section, values, message", [
    ("dataset", {"share": 2}, "dataset.share=2 must be a number in [0, 1] (a share)"),
    ("dataset", {"below": 1}, "dataset.below=1 must be a number in [0, 1)"),
    ("model", {"at_most": 11}, "model.at_most=11 must be an integer <= 10"),
    ("", {"share": float("inf")}, "share=inf must be a number in [0, 1]"),
    ("", {"delays": [-1]}, "delays=[-1] must be a list of numbers >= 0"),
    ("", {"extra": [1]}, "extra=[1] must be a mapping, or null"),
    ("dataset", {"name": "x", "foo": 1}, "unknown option dataset.foo for dataset=x; its options are: at_most, below,"),
    ("", {"foo": 1, "bar": 2}, "unknown keys bar, foo; valid keys are: at_most, below, delays, extra, name, share"),
])
def test_any_section_is_checked_and_named_by_its_prefix(section, values, message):
    with pytest.raises(UserError) as e:
        validate(Section, values, section=section)
    assert str(e.value).startswith(message) and len(str(e.value).splitlines()) == 1, str(e.value)


def test_what_a_section_allows():
    assert validate(Section, {"name": "x", "delays": [], "extra": {"a": 1}, "share": 1, "below": 0.99},
                    section="dataset").extra == {"a": 1}
    with pytest.raises(UserError, match=r"^unknown option dataset.plugin"):  # `plugin` is reserved in `method` only
        validate(Section, {"name": "x", "plugin": "y"}, section="dataset")
