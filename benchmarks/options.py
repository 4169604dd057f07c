"""Typed method options: each method (and family) declares its options once, as a dataclass whose
fields carry the default, the type and the allowed range; `validate` turns the composed
`cfg["method"]` into that dataclass or raises a one-line UserError naming the option.

    @dataclass
    class Options(MiniBatchMethod.Options):
        batch_size: int = option(512, "seed nodes per worker and step", ge=1)
        store: Literal["partitioned", "replicated"] = option("partitioned")

        def check(self, cfg):       # checks across options, or against the run (`layers`)
            ...

Types: bool, int, float (an int is a number too), str, Literal[...] (choices), Optional[X] (null
allowed) and list[X] (non-empty; bounds hold for every element). Values are kept as given (no
conversion), so the validated dict is the composed one, with defaults filled in.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from typing import Literal, Union

from benchmarks.errors import UserError, choose

#: Keys of `cfg["method"]` that are not options: the method's name, and the plugin an alias runs.
RESERVED = ("name", "plugin")


def option(default, doc: str = "", *, ge=None, gt=None, also=(), message: str | None = None):
    """A declared option: its default; `doc`, what it is (said in the error, in parentheses);
    numeric bounds `ge`/`gt` (of each element, for a list); `also`, values allowed outside the bounds
    (-1: every neighbour); `message`, a whole error line with `{value}` where an older message must
    be kept word for word."""
    meta = {"doc": doc, "ge": ge, "gt": gt, "also": tuple(also), "message": message}
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclasses.dataclass
class Options:
    """A method's options; the base declares none. Subclass it as a dataclass, fields by `option`."""

    def check(self, cfg: dict) -> None:
        """Checks across options or against the rest of the run config `cfg` (each field is already
        valid on its own); raise UserError. Called before launch, with every option filled in."""


def validate(options_cls: type[Options], method_cfg: dict, cfg: dict | None = None) -> Options:
    """`method_cfg` (a composed `cfg["method"]`: name, an alias's plugin, options) as `options_cls`;
    missing options take their defaults. Unknown keys, wrong types, values out of range and failed
    `check`s raise a one-line UserError."""
    fields = {f.name: f for f in dataclasses.fields(options_cls)}
    unknown = sorted(set(method_cfg) - set(fields) - set(RESERVED))
    if unknown:
        name = method_cfg.get("name", "?")
        valid = f"its options are: {', '.join(sorted(fields))}" if fields else "it takes none"
        raise UserError(f"unknown option{'s' if len(unknown) > 1 else ''} "
                        f"{', '.join(f'method.{k}' for k in unknown)} for method={name}; {valid}")
    hints = typing.get_type_hints(options_cls)
    for key, value in method_cfg.items():
        if key in fields:
            _check(key, value, hints[key], fields[key].metadata)
    options = options_cls(**{k: v for k, v in method_cfg.items() if k in fields})
    options.check(cfg or {})
    return options


def as_dict(options: Options) -> dict:
    """The options as plain values (what `cfg["method"]` holds besides its name)."""
    return dataclasses.asdict(options)


def defaults(options_cls: type[Options]) -> dict:
    return as_dict(options_cls())


# --------------------------------------------------------------------------- checks
def _optional(tp):
    """(X, True) for Optional[X], else (tp, False)."""
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0], True
    return tp, False


def _fits(value, tp, meta) -> bool:
    if tp is bool:
        return isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if tp in (int, float):
        if isinstance(value, bool) or not isinstance(value, int if tp is int else (int, float)):
            return False
        if value in meta["also"]:
            return True
        return ((meta["ge"] is None or value >= meta["ge"]) and (meta["gt"] is None or value > meta["gt"])
                and value == value)  # not NaN
    raise TypeError(f"option type {tp} is not supported")


def _requirement(tp, meta, plural: bool = False) -> str:
    """What a value must be, in words: 'a positive integer', 'a number >= 0', 'true or false'."""
    if tp is bool:
        return "true or false values" if plural else "true or false"
    if tp is str:
        return "strings" if plural else "a string"
    noun = ("integer" if tp is int else "number") + ("s" if plural else "")
    ge, gt = meta["ge"], meta["gt"]
    if (tp is int and ge == 1) or gt == 0:
        words = f"positive {noun}"
    elif tp is int and ge == 0:
        words = f"non-negative {noun}"
    elif ge is not None or gt is not None:
        words = f"{noun} {'>=' if ge is not None else '>'} {ge if ge is not None else gt}"
    else:
        words = noun
    return words if plural else ("an " if words[0] in "aeiou" else "a ") + words


def _check(key: str, value, tp, meta) -> None:
    tp, optional = _optional(tp)
    if value is None and optional:
        return
    if typing.get_origin(tp) is Literal:
        choose(f"method.{key}", value, typing.get_args(tp))
        return
    if typing.get_origin(tp) is list:
        (item,) = typing.get_args(tp)
        ok = isinstance(value, list) and bool(value) and all(_fits(v, item, meta) for v in value)
        requirement = "a list of " + _requirement(item, meta, plural=True)
    else:
        ok = _fits(value, tp, meta)
        requirement = _requirement(tp, meta)
    if ok:
        return
    if meta["message"]:
        raise UserError(meta["message"].format(value=value))
    raise UserError(f"method.{key}={value!r} must be {requirement}{', or null' if optional else ''}"
                    + (f" ({meta['doc']})" if meta["doc"] else ""))
