"""Every method's exact control is exact, by the one rule of docs/adding-a-method.md ("Exact control"),
and is held to `single`: enrolled here automatically, over the registry (a new plugin in methods/ or
GNNBENCH_METHODS_PATH needs no line here).

- The rule (in-process, fast): an approximate method names its control (`About.exact_control`); a
  sampled method (`MiniBatchMethod`, `SubgraphMethod`) has `single`, its family's; the control is its
  own control (nothing left to switch off).
- The control against `single` (runs): each distinct control of the registry, run at two workers
  (dropout off: COMMON), gives `single`'s losses, gradients and accuracies (`exactness.assert_matches`)."""
from __future__ import annotations

import pytest

from benchmarks.base.registry import plugin_names
from benchmarks.commands.composition import config_of
from benchmarks.commands.sweep import control_overrides
from benchmarks.run.config import check, control_config
from benchmarks.run.method import method_class
from benchmarks.run.methods_table import family
from tests.methods.exactness import DATASETS, assert_matches, oracle, run_ok

#: The setting every control runs at: the small synthetic graph cut at random (big halos), two workers,
#: no dropout: a control keeps its method's layer-0 treatment (`layer0=precomputed` aggregates the
#: features once, before any dropout of them), which is `single`'s computation only without input dropout.
COMMON = [*DATASETS["synthetic"], "workers=2", "model=sage", "dropout=0"]
SAMPLED = ("MiniBatchMethod", "SubgraphMethod")


def control_of(name: str) -> list[str] | None:
    """The overrides of plugin `name`'s exact control at COMMON (None: an exact method, its own control)."""
    run = [f"method={name}", *COMMON]
    checked = check(config_of(run))
    return None if control_config(checked) is None else control_overrides(run, checked)


@pytest.mark.fast
@pytest.mark.parametrize("name", plugin_names())
def test_every_method_follows_the_exact_control_rule(name):
    cls = method_class(name)
    control = cls.About.exact_control
    if family(cls) in SAMPLED:
        assert control == {"name": "single"}, (
            f"method {name}: a sampled method's exact control is `single` (docs/adding-a-method.md, 'Exact "
            f"controls'); remove its About.exact_control = {control!r} and keep its family's")
    overrides = control_of(name)
    if overrides is not None:
        assert control_config(check(config_of(overrides))) is None, (
            f"method {name}: its exact control ({' '.join(overrides)}) still has an approximation to switch off; "
            "About.exact_control must turn every approximation off")


#: Each distinct control of the registry but `single` itself (which is the oracle), with the plugins it serves.
CONTROLS: dict[tuple[str, ...], list[str]] = {}
for _name in plugin_names():
    _overrides = control_of(_name)
    if _overrides is not None and "method=single" not in _overrides:
        CONTROLS.setdefault(tuple(_overrides), []).append(_name)


@pytest.mark.parametrize("overrides", list(CONTROLS), ids=[" ".join(CONTROLS[o]) for o in CONTROLS])
def test_each_exact_control_is_single(make_cfg, overrides):
    single, single_grads = oracle(make_cfg, COMMON)
    path, record = run_ok(make_cfg(*overrides, "probe_grads=true"))
    assert_matches(record, path, single, single_grads,
                   f"method {', '.join(CONTROLS[overrides])}: its exact control ({' '.join(overrides)}) is not "
                   "`single`; its About.exact_control must switch off everything that changes the computation")
