# SPDX-License-Identifier: Apache-2.0
"""Hostile URDFs (hypothesis): the parser builds a valid model or raises URDFError, quickly.

Mutations of real and test URDFs: attribute values replaced by numbers, huge numbers, 'nan',
'inf', empty strings, garbage and unicode; elements deleted or duplicated; joint types swapped;
documents truncated; deep nesting; entity declarations. And whole robots drawn at random:
trees and chains up to past the body limit, every joint type, links without <inertial>, zero
masses, massless leaves, huge but finite numbers. When a model comes out, the reference and the
generated dynamics at the neutral configuration are finite or raise ValueError (forward
dynamics of a joint that moves no inertia, say), within a bounded time.
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

from rb_dynamics.dynamics import make_dynamics
from rb_dynamics.dynamics import reference as D
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


def _check(xml: str, seconds: float = 2.0) -> None:
    start = time.monotonic()
    try:
        model = load_model(xml)
    except URDFError:
        assert time.monotonic() - start < seconds
        return
    assert time.monotonic() - start < seconds
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
    if model.n_bodies > 40:
        return  # nodes keep models this large on the reference algorithms (implementations.py)
    try:
        fast = make_dynamics(model, kernels="python")
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


NUMBERS = st.one_of(st.floats(-10, 10), st.sampled_from([0.0, 1e-12, 1e8, -1e8, 1e9]))


def _inertial(kind: str, mass: float, inertia: float, x: float, z: float) -> str:
    if kind == "none":
        return ""
    mass = {"zero_mass": 0.0, "point": 1.0, "huge": 1e8}.get(kind, mass)
    inertia = 0.0 if kind in ("point", "zero_mass") else inertia
    return (f'<inertial><origin xyz="{x} 0 {z}"/><mass value="{mass}"/>'
            f'<inertia ixx="{inertia}" iyy="{inertia}" izz="{inertia}"/></inertial>')


def _joint(i: int, parent: int, kind: str, axis: str, y: float) -> str:
    return (f'<joint name="j{i}" type="{kind}"><parent link="l{parent}"/><child link="l{i}"/>'
            f'<origin xyz="0 {y} 0.1" rpy="0 0.3 0"/><axis xyz="{axis}"/>'
            '<limit lower="-1" upper="1" effort="10" velocity="1"/></joint>')


LINK_KINDS = st.sampled_from(["full", "none", "zero_mass", "point", "huge"])
JOINT_KINDS = st.sampled_from(["revolute", "continuous", "prismatic", "fixed", "floating",
                               "planar"])
AXES = st.sampled_from(["1 0 0", "0 1 0", "0 0 1", "1 1 0", "0 0 0"])


@st.composite
def robots(draw) -> str:
    """A random tree of up to 25 random joints and links, or a chain around the body limit
    (every link of one drawn kind, so that the example stays small)."""
    if draw(st.integers(0, 4)) == 0:
        n, link_kind = draw(st.integers(900, 1100)), draw(LINK_KINDS)
        joint_kind, axis = draw(JOINT_KINDS), draw(AXES)
        links = [f'<link name="l{i}">{_inertial(link_kind, 0.5, 1e-3, 0.0, 0.05)}</link>'
                 for i in range(n + 1)]
        joints = [_joint(i, i - 1, joint_kind, axis, 0.0) for i in range(1, n + 1)]
    else:
        n = draw(st.integers(0, 25))
        links = [f'<link name="l{i}">' + _inertial(
            draw(LINK_KINDS), draw(st.floats(0.01, 5)), draw(st.floats(1e-6, 1)),
            draw(NUMBERS), draw(NUMBERS)) + "</link>" for i in range(n + 1)]
        joints = [_joint(i, draw(st.integers(0, i - 1)), draw(JOINT_KINDS), draw(AXES),
                         draw(NUMBERS)) for i in range(1, n + 1)]
    return '<robot name="random">' + "".join(links + joints) + "</robot>"


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(xml=robots())
def test_random_robots_load_with_finite_dynamics_or_are_refused(xml):
    _check(xml, seconds=10.0)
