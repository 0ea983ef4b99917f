"""Hostile URDFs (hypothesis): the parser builds a valid model or raises URDFError, quickly.

Mutations of real and test URDFs: attribute values replaced by numbers, huge numbers, 'nan',
'inf', empty strings, garbage and unicode; elements deleted or duplicated; joint types swapped;
documents truncated; deep nesting; entity declarations. When a model comes out, the reference
and the generated dynamics at the neutral configuration are finite or raise ValueError.
"""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pin_oracle import REAL_ROBOTS, robots_dir
from urdf_samples import kitchen_sink_urdf

from rb_dynamics import dynamics as D
from rb_dynamics.codegen import compile_dynamics
from rb_dynamics.model import URDFError, load_model

SOURCES = [kitchen_sink_urdf(), Path(robots_dir(), REAL_ROBOTS["ur5"][0]).read_text()]
ATTRIBUTE = re.compile(r'(\w+)="([^"]*)"')
VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["", "nan", "inf", "-inf", "1e308", "-1e308", "1e-320", "0 0", "1 2 3 4",
                     "abc", "☃", "0x10", "1,2,3", "  ", "fixed", "floating", "planar", "world"]),
    st.text(max_size=12),
)
PROFILE = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _check(xml: str) -> None:
    start = time.monotonic()
    try:
        model = load_model(xml)
    except URDFError:
        assert time.monotonic() - start < 2.0
        return
    assert time.monotonic() - start < 2.0
    q, zero = model.neutral_configuration(), np.zeros(model.nv)
    for compute in (lambda: D.gravity(model, q), lambda: D.rnea(model, q, zero, zero),
                    lambda: D.aba(model, q, zero, zero)):
        try:
            value = compute()
        except (ValueError, np.linalg.LinAlgError):
            continue
        assert np.all(np.isfinite(value)), value
    # generation is shared by both backends: the Python kernels test it without a compiler run
    # per example; any model load_model accepts compiles or raises ValueError, nothing else
    try:
        fast = compile_dynamics(model, kernels="python")
        value = fast.gravity(q)
    except ValueError:
        return
    assert np.all(np.isfinite(value)), value


@PROFILE
@given(source=st.sampled_from(SOURCES), data=st.data())
def test_mutated_attributes(source, data):
    matches = list(ATTRIBUTE.finditer(source))
    picks = data.draw(st.lists(st.integers(0, len(matches) - 1), min_size=1, max_size=4))
    xml = source
    for index in sorted(set(picks), reverse=True):
        m = matches[index]
        value = data.draw(VALUES).replace('"', "").replace("<", "").replace("&", "")
        xml = xml[:m.start(2)] + value + xml[m.end(2):]
    _check(xml)


@PROFILE
@given(source=st.sampled_from(SOURCES), data=st.data())
def test_deleted_duplicated_and_truncated_elements(source, data):
    elements = list(re.finditer(r"<(link|joint|inertial|origin|axis|mass|inertia|limit|mimic|"
                                r"parent|child)\b[^>]*?(/>|>.*?</\1>)", source, re.S))
    xml = source
    action = data.draw(st.sampled_from(["delete", "duplicate", "truncate"]))
    if action == "truncate":
        xml = xml[:data.draw(st.integers(0, len(xml)))]
    elif elements:
        m = elements[data.draw(st.integers(0, len(elements) - 1))]
        replacement = "" if action == "delete" else m.group(0) * 2
        xml = xml[:m.start()] + replacement + xml[m.end():]
    _check(xml)


def test_deep_nesting_huge_numbers_and_entities():
    _check("<robot name='r'>" + "<a>" * 100_000 + "</a>" * 100_000 + "<link name='x'/></robot>")
    _check(kitchen_sink_urdf().replace('value="2.0"', 'value="1e308"'))
    _check(kitchen_sink_urdf().replace('xyz="0.1 -0.05 0.3"', 'xyz="1e200 1e200 1e200"'))
    billion = ('<!DOCTYPE r [<!ENTITY a "aaaaaaaaaa">' + "".join(
        f'<!ENTITY a{i} "{"&a" + (str(i - 1) if i > 1 else "") + ";"}' * 10 + '">'
        for i in range(1, 8)) + ']><robot name="&a7;"><link name="x"/></robot>')
    _check(billion)
    assert math.isfinite(1.0)
