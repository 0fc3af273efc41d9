"""Every numeric option declares its valid range; values outside it are refused when set.

The schemas of every package are walked here (job groups, every component a choice can
swap in, the registered components themselves, the dispatch targets), so a new ``int`` or
``float`` option without ``ge``/``gt``/``le``/``lt`` (or ``finite=True``) fails this test.
"""

from __future__ import annotations

import dataclasses
import math
import typing

import pytest
from theseus.core.components import Choice
from theseus.core.config import ConfigTree
from theseus.core.config_sources import parse_overrides
from theseus.core.errors import ConfigError
from theseus.core.plugins import registries
from theseus.core.ranges import Range, range_of
from theseus.core.runner import config_for, job_spec

NUMBERS = (int, float)


def _numeric(tp: typing.Any) -> bool:
    """int, float, ``int | None``, ``list[int]``: a field whose values are numbers."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) is list:
        return bool(args) and args[0] in NUMBERS
    if args and typing.get_origin(tp) is not dict:
        return args[0] in NUMBERS
    return tp in NUMBERS


def numeric_fields(schema: type, prefix: str) -> typing.Iterator[tuple[str, dataclasses.Field]]:
    hints = typing.get_type_hints(schema)
    for found in dataclasses.fields(schema):
        tp = hints[found.name]
        if dataclasses.is_dataclass(tp):
            yield from numeric_fields(tp, f"{prefix}.{found.name}")
        elif _numeric(tp):
            yield f"{prefix}.{found.name}", found


def every_schema() -> dict[str, type]:
    """Where a schema is used -> the schema, for every first-party and example schema."""
    from theseus.dispatch.config import BUILTIN_SCHEMAS

    regs = registries()
    schemas: dict[str, type] = {}
    for key, spec in regs.jobs.items():
        for group, kind in spec.groups.items():
            if isinstance(kind, Choice):
                for name, component in regs.component(kind.registry).items():
                    schemas[f"{key} {group}[{name}]"] = component.config
            else:
                schemas[f"{key} {group}"] = kind
    for kind in ("evaluations", "loggers", "datasets", "tokenizers"):
        for name, component in regs.component(kind).items():
            schemas[f"{kind}[{name}]"] = component.config
    for name, schema in BUILTIN_SCHEMAS.items():
        schemas[f"dispatch target {name}"] = schema
    return schemas


def test_every_numeric_option_of_every_package_declares_a_range_that_holds_its_default():
    missing, outside, seen = [], [], 0
    for where, schema in every_schema().items():
        for key, found in numeric_fields(schema, where):
            seen += 1
            declared = range_of(found.metadata)
            if declared is None:
                missing.append(key)
                continue
            default = found.default
            if found.default_factory is not dataclasses.MISSING:
                default = found.default_factory()
            values = default if isinstance(default, list) else [default]
            for value in values:
                if value not in (None, dataclasses.MISSING, "???") and declared.problem(value):
                    outside.append(f"{key}={value}: {declared.problem(value)}")
    assert seen > 250  # the walk reached every package (266 fields when this was written)
    assert not missing, f"numeric options without a range: {sorted(set(missing))[:20]}"
    assert not outside, outside


@pytest.mark.parametrize(
    ("declared", "value", "problem"),
    [
        (Range(ge=1), 0, "must be at least 1"),
        (Range(ge=1), 1, None),
        (Range(ge=0), -1, "must be 0 or more"),
        (Range(gt=0), 0.0, "must be greater than 0"),
        (Range(gt=0), 1e-30, None),
        (Range(gt=0), math.nan, "must be a finite number greater than 0"),
        (Range(gt=0), math.inf, "must be a finite number greater than 0"),
        (Range(ge=0, lt=1), 1.0, "must be in [0, 1)"),
        (Range(ge=0, lt=1), 0.0, None),
        (Range(gt=0, le=1), 1.0, None),
        (Range(ge=1, le=65535), 65536, "must be in [1, 65535]"),
        (Range(), -math.inf, "must be a finite number"),
        (Range(), -3.5, None),
        (Range(ge=0), True, None),  # a bool is the type check's business, not the range's
    ],
)
def test_a_range_names_what_is_wrong(declared, value, problem):
    assert declared.problem(value) == problem


def refusal(override: str) -> str:
    """The one-line error the pretraining job's config gives when ``override`` is set."""
    regs = registries()
    with pytest.raises(ConfigError) as caught:
        config_for(job_spec("gpt/train/pretrain", regs), regs, [override])
    return str(caught.value)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        # outside a declared range
        ("optimizer.learning_rate=-1", "optimizer.learning_rate=-1.0: must be 0 or more"),
        ("optimizer.learning_rate=nan", "optimizer.learning_rate=nan: must be a finite number"),
        ("data.validation_fraction=-0.5", "data.validation_fraction=-0.5: must be in [0, 1)"),
        ("optimizer.b2=1", "optimizer.b2=1.0: must be in [0, 1)"),
        ("sharding.tensor=-2", "sharding.tensor=-2: must be at least -1"),
        ("model.d_model=0", "model.d_model=0: must be at least 1"),
        # not one of a string option's choices
        ("sharding.remat=most", "sharding.remat='most': expected one of auto, none, block"),
        ("model.dtype=float8", "model.dtype='float8': expected one of auto, float32"),
        ("data.padding_side=up", "data.padding_side='up': expected one of left, right"),
        ("lora.base_dtype=int8", "lora.base_dtype='int8': expected one of '', float32"),
    ],
)
def test_a_value_outside_its_range_or_choices_is_one_line_naming_it(override, message):
    assert refusal(override).startswith(message)


def test_values_outside_their_range_are_refused_when_set_and_the_range_is_shown():
    regs = registries()
    spec = job_spec("gpt/train/pretrain", regs)
    tree = ConfigTree(spec, regs)
    tree.apply(parse_overrides(["optimizer.name=sgd"]))  # a swapped-in component is checked too
    with pytest.raises(ConfigError, match=r"optimizer.momentum=1.0: must be in \[0, 1\)"):
        tree.set("optimizer.momentum", 1)
    rows = {row["key"]: row for row in tree.describe()}
    assert rows["optimizer.learning_rate"]["range"] == "[0, inf)"
    assert rows["training.seq_len"]["range"] == "[1, inf)"
    assert "# float in [0, inf): peak learning rate" in tree.annotated_yaml()


def test_a_string_option_with_choices_refuses_others_once_where_it_is_set_and_shows_them():
    """``option(choices=...)``: refused when set on the command line (one line naming the
    key and the choices, ``test_a_value_outside_its_range_or_choices_is_one_line_naming_it``),
    refused when the config is built in Python, shown by ``theseus config``; every declared
    default is one of its choices."""
    from theseus.core.ranges import choices_of
    from theseus.core.recipes.grpo_config import GRPOConfig
    from theseus.core.sharding.config import ShardingConfig, ShardingError

    regs = registries()
    spec = job_spec("gpt/train/pretrain", regs)
    with pytest.raises(ConfigError, match=r"^grpo.loss='mean': expected one of token_mean"):
        GRPOConfig(loss="mean")
    with pytest.raises(ShardingError, match=r"^sharding.context_order='spiral'"):
        ShardingConfig(context_order="spiral")
    rows = {row["key"]: row for row in ConfigTree(spec, regs).describe()}
    assert rows["sharding.context_attention"]["range"] == "{ring, all_gather}"
    declared = 0
    for where, schema in every_schema().items():
        for found in dataclasses.fields(schema):
            choices = choices_of(found.metadata)
            if choices and isinstance(found.default, str):
                declared += 1
                assert found.default in choices, (where, found.name, found.default, choices)
    assert declared > 30  # the walk met the choices of every job's groups


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "optimizer.learning_rate=1e300",
            "must be at most 3.402823e+38 in size, the largest float32",
        ),
        ("model.d_model=2147483648", "must be at most 2147483647: it sizes the step's arrays"),
        ("training.global_batch_size=10000000000000", "must be at most 2147483647"),
        ("training.total_steps=10000000000000000000000", "must be at most 9223372036854775807"),
        ("data.max_documents=10000000000000000000000", "must be at most 9223372036854775807"),
    ],
)
def test_a_number_beyond_what_the_step_computes_with_is_refused(override, message):
    """Every number, declared range or not: within int64 (a size of the step's arrays: int32)
    and float32's range."""
    assert refusal(override).startswith(override.replace("1e300", "1e+300") + ": " + message)
    # as large as still computes: a host count beyond 32 bits, the largest step size
    regs = registries()
    spec = job_spec("gpt/train/pretrain", regs)
    for fine in (
        "data.max_documents=5000000000",
        "model.d_model=2147483647",
        "training.seed=4294967296",
    ):
        config_for(spec, regs, [fine])


def test_a_limit_derived_from_other_values_is_one_line():
    from theseus.core.ranges import check_at_most
    from theseus.core.sharding.config import ShardingConfig
    from theseus.core.train.execution_choice import dispatch_capacity

    with pytest.raises(
        ConfigError, match=r"^sharding.expert_capacity=1e\+30: must be at most 8 \("
    ):
        dispatch_capacity("all_to_all", ShardingConfig(expert_capacity=1e30), 0.0, experts=8)
    assert dispatch_capacity("all_to_all", ShardingConfig(expert_capacity=8), 0.0, 8)[0] == 8.0
    check_at_most("k", 2.0, 2, "why")  # at the limit is fine
