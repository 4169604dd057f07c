"""Typed options: every key of a run's configuration is declared once, as a field of a dataclass that
carries the default, the type and the allowed range, and `validate` turns a composed section into
that dataclass or raises a one-line UserError naming the key. Each method (and family) declares its
`method.*` options; the top-level keys (`benchmarks.run.config.RunOptions`), each dataset's
(`datasets.SyntheticOptions`) and the models' (`models.ModelOptions`) are declared the same way.

    @dataclass(frozen=True)
    class Options(MiniBatchMethod.Options):
        batch_size: int = option(512, "seed nodes per worker and step", ge=1)
        store: Literal["partitioned", "replicated"] = option("partitioned")

        def check(self, cfg):       # checks across options, or against the run (`layers`)
            ...

Types: bool, int, float (an int is a number too; NaN and infinities are not), str, Literal[...]
(choices), Optional[X] (null allowed), list[X] (non-empty unless `empty=True`; bounds hold for every
element) and dict (a mapping, its contents not checked). Values are kept as given (no conversion; `as_dict`
spells a float option given as an integer as a float, so `dropout=0` and `dropout=0.0` are one run).
A field declared `option(MISSING, ...)` is required: its absence is a one-line error naming it.
Every options class is frozen: what was validated is what runs.
"""
from __future__ import annotations

import copy
import functools
import dataclasses
import math
import types
import typing
from typing import ClassVar, Literal, Union

from benchmarks.base.errors import UserError, choose

#: Keys of the `method` section that are not options: the method's name, and the plugin an alias runs.
RESERVED = ("name", "plugin")


#: Seeds reach C code (pymetis takes a C long long, torch a 64-bit integer): one range for every seed.
SEED_RANGE = {"ge": 0, "lt": 2 ** 63}


def seed_option(default: int = 0, doc: str = ""):
    """A seed: an integer in [0, 2^63)."""
    return option(default, doc, **SEED_RANGE, message="{key}={value!r} must be an integer in [0, 2^63)"
                                                     + (f" ({doc})" if doc else ""))


def option(default, doc: str = "", *, ge=None, gt=None, le=None, lt=None, also=(), empty: bool = False,
           message: str | None = None):
    """A declared option: its default; `doc`, what it is (said in the error, in parentheses, and in the
    option references: docs/methods.md for a method's options, `python -m benchmarks --methods`;
    docs/options.md for every other section's, `--options`); numeric bounds `ge`/`gt`/`le`/`lt` (of each
    element, for a list); `also`, values allowed outside the bounds (-1: every neighbour); `empty`,
    whether a list may be empty; `message`, a whole error line with `{key}` and `{value}` where an
    older message must be kept word for word."""
    meta = {"doc": doc, "ge": ge, "gt": gt, "le": le, "lt": lt, "also": tuple(also), "empty": empty,
            "message": message}
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclasses.dataclass(frozen=True)
class Options:
    """A section's options (a method's, a dataset's...); the base declares none. Subclass it as a
    dataclass, fields by `option`."""

    #: Keys of the section that are valid but not options (checked elsewhere): for a method its name
    #: and an alias's plugin; a dataset's or a model's name; the top level's sections.
    reserved: ClassVar[tuple[str, ...]] = RESERVED

    def check(self, run) -> None:
        """Checks across options, or against the run (`run`: the `config.RunConfig` being built, or
        None for a section validated on its own); each field is already valid on its own; raise
        UserError. Called before launch, with every option filled in."""


def validate(options_cls: type[Options], values: dict, run=None, section: str = "method") -> Options:
    """`values` (a composed section of the run config, e.g. the `method` section: name, an alias's
    plugin, options) as `options_cls`; missing options take their defaults. `section` is where the
    values sit in the run config (`method`, `dataset`, `model`; "" for the top level): errors name
    each key with it (`method.mode`, `dataset.homophily`, `lr`). Unknown keys, wrong types, values
    out of range and failed `check`s raise a one-line UserError."""
    fields = {f.name: f for f in dataclasses.fields(options_cls)}
    unknown = sorted(set(values) - set(fields) - set(options_cls.reserved))
    if unknown:
        plural = "s" if len(unknown) > 1 else ""
        if not section:
            raise UserError(f"unknown key{plural} {', '.join(unknown)}; valid keys are: "
                            f"{', '.join(sorted({*fields, *options_cls.reserved}))}")
        name = values.get("name")
        valid = f"its options are: {', '.join(sorted(fields))}" if fields else "it takes none"
        raise UserError(f"unknown option{plural} {', '.join(f'{section}.{k}' for k in unknown)}"
                        f"{f' for {section}={name}' if name else ''}; {valid}")
    missing = [f.name for f in dataclasses.fields(options_cls)  # declared `option(MISSING, ...)`: required
               if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
               and f.name not in values]
    if missing:
        prefix = f"{section}." if section else ""
        raise UserError(f"missing key{'s' if len(missing) > 1 else ''} {', '.join(prefix + m for m in missing)}")
    hints = type_hints(options_cls)
    for key, value in values.items():
        if key in fields:
            _check(f"{section}.{key}" if section else key, value, hints[key], fields[key].metadata)
    options = options_cls(**{k: v for k, v in values.items() if k in fields})
    options.check(run)
    return options


def as_dict(options: Options, declared_by: type[Options] | None = None) -> dict:
    """The options as plain values (what a section of the run config holds besides its name), each
    as its declared type: an integer given for a float option is a float here, so `dropout=0` and
    `dropout=0.0` are one configuration, one record name. `declared_by`: only the fields that class
    declares (a subclass's object)."""
    cls = declared_by or type(options)
    hints = type_hints(cls)
    return {f.name: _as_declared(copy.deepcopy(getattr(options, f.name)), hints[f.name])
            for f in dataclasses.fields(cls)}


@functools.cache
def type_hints(options_cls: type[Options]) -> dict:
    """`typing.get_type_hints(options_cls)`, once a class: a class's annotations are fixed when it is made, and
    evaluating them (string annotations, `from __future__ import annotations`) was most of a sweep's checks."""
    return typing.get_type_hints(options_cls)


def defaults(options_cls: type[Options]) -> dict:
    return as_dict(options_cls())


# --------------------------------------------------------------------------- checks
def _as_declared(value, tp):
    """An integer given for a float option as a float (one run, one spelling); anything else as is."""
    tp, _ = _optional(tp)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if typing.get_origin(tp) is list and typing.get_args(tp) == (float,) and isinstance(value, list):
        return [float(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in value]
    return value


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
    if tp is dict:
        return isinstance(value, dict)
    if tp in (int, float):
        if isinstance(value, bool) or not isinstance(value, int if tp is int else (int, float)):
            return False
        if value in meta["also"]:
            return True
        return (math.isfinite(value)  # not NaN, not infinite
                and (meta["ge"] is None or value >= meta["ge"]) and (meta["gt"] is None or value > meta["gt"])
                and (meta["le"] is None or value <= meta["le"]) and (meta["lt"] is None or value < meta["lt"]))
    raise TypeError(f"option type {tp} is not supported")


def type_name(tp) -> str:
    """The option's type as the option reference prints it: `int`, `choice`, `list of float`, `int or null`."""
    tp, optional = _optional(tp)
    if typing.get_origin(tp) is Literal:
        name = "choice"
    elif typing.get_origin(tp) is list:
        name = f"list of {typing.get_args(tp)[0].__name__}"
    else:
        name = "mapping" if tp is dict else tp.__name__
    return name + (" or null" if optional else "")


def allowed(tp, meta) -> str:
    """What a value may be, as the option reference prints it: the choices, or the error's words with
    what an error leaves out (the values allowed outside the bounds, whether a list may be empty)."""
    tp, optional = _optional(tp)
    if typing.get_origin(tp) is Literal:
        words = ", ".join(f"`{c}`" for c in typing.get_args(tp))
    else:
        words = _words(tp, meta) + "".join(f", or {v}" for v in meta["also"])
        words += " (may be empty)" if typing.get_origin(tp) is list and meta["empty"] else ""
    return words + (", or null" if optional else "")


def _words(tp, meta) -> str:
    """What a value of a type that is not a choice must be, as its error says it: 'a positive integer',
    'a list of numbers >= 0' (null aside)."""
    if typing.get_origin(tp) is list:
        return "a list of " + _requirement(typing.get_args(tp)[0], meta, plural=True)
    return _requirement(tp, meta)


def _requirement(tp, meta, plural: bool = False) -> str:
    """What a value must be, in words: 'a positive integer', 'a number >= 0', 'true or false'."""
    if tp is bool:
        return "true or false values" if plural else "true or false"
    if tp is str:
        return "strings" if plural else "a string"
    if tp is dict:
        return "mappings" if plural else "a mapping"
    noun = ("integer" if tp is int else "number") + ("s" if plural else "")
    ge, gt, le, lt = meta["ge"], meta["gt"], meta["le"], meta["lt"]
    low, high = _spelt(ge if ge is not None else gt), _spelt(le if le is not None else lt)
    if (le is not None or lt is not None) and (ge is not None or gt is not None):
        words = f"{noun} in {'[' if ge is not None else '('}{low}, {high}{']' if le is not None else ')'}"
    elif le is not None or lt is not None:
        words = f"{noun} {'<=' if le is not None else '<'} {high}"
    elif (tp is int and ge == 1) or gt == 0:
        words = f"positive {noun}"
    elif tp is int and ge == 0:
        words = f"non-negative {noun}"
    elif ge is not None or gt is not None:
        words = f"{noun} {'>=' if ge is not None else '>'} {low}"
    else:
        words = noun
    return words if plural else ("an " if words[0] in "aeiou" else "a ") + words


def _spelt(bound) -> str:
    """A bound as people write it: a C type's limit as `2^31`, not `2147483648`."""
    if isinstance(bound, int) and bound >= 2 ** 20 and bound & (bound - 1) == 0:
        return f"2^{bound.bit_length() - 1}"
    return str(bound)


def _check(key: str, value, tp, meta) -> None:
    """`key`: the option's full name (`method.mode`, `dataset.homophily`, `lr`)."""
    tp, optional = _optional(tp)
    if value is None and optional:
        return
    if typing.get_origin(tp) is Literal:
        choose(key, value, typing.get_args(tp))
        return
    if typing.get_origin(tp) is list:
        (item,) = typing.get_args(tp)
        ok = (isinstance(value, list) and (bool(value) or meta["empty"])
              and all(_fits(v, item, meta) for v in value))
    else:
        ok = _fits(value, tp, meta)
    if ok:
        return
    if meta["message"]:
        raise UserError(meta["message"].format(key=key, value=value))
    raise UserError(f"{key}={value!r} must be {_words(tp, meta)}{', or null' if optional else ''}"
                    + (f" ({meta['doc']})" if meta["doc"] else ""))
