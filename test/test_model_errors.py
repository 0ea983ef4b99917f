# SPDX-License-Identifier: Apache-2.0
"""Bad URDFs raise URDFError naming the element; bad states raise ValueError naming the argument."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from urdf_samples import kitchen_sink_urdf

from rb_dynamics.dynamics import reference as D
from rb_dynamics.model import (
    URDFError,
    check_choice,
    check_positive,
    finite_vector,
    load_model,
)

LINK = (
    '<link name="{}"><inertial><mass value="1"/>'
    '<inertia ixx="0.1" iyy="0.1" izz="0.1"/></inertial></link>'
)


def robot(*parts: str) -> str:
    return '<robot name="r">' + "".join(parts) + "</robot>"


def joint(name="j", kind="revolute", parent="a", child="b", extra="<axis xyz='0 0 1'/>"):
    return (
        f'<joint name="{name}" type="{kind}"><parent link="{parent}"/>'
        f'<child link="{child}"/>{extra}</joint>'
    )


GOOD = robot(LINK.format("a"), LINK.format("b"), joint())


def test_good_urdf_loads_and_summarises():
    model = load_model(GOOD)
    assert (model.nq, model.nv, model.joint_names) == (1, 1, ["j"])
    text = model.summary()
    assert "nq=1" in text and "total mass 1 kg" in text and "j" in text
    assert str(model) == text


@pytest.mark.parametrize(
    "xml, words",
    [
        ("<robot name='r'><link name='a'>", "malformed XML"),
        ("not xml at all <", "malformed XML"),
        ("<robot/>", "no <link>"),
        ("<model><link name='a'/></model>", "expected <robot>"),
        (
            robot(
                LINK.format("a"),
                LINK.format("b"),
                joint(parent="a", child="b"),
                joint(name="k", parent="b", child="a"),
            ),
            "cycle",
        ),
        (robot(LINK.format("a"), LINK.format("b"), LINK.format("c"), joint()), "root links"),
        (robot(LINK.format("a"), LINK.format("b"), joint(parent="nope")), "parent link 'nope'"),
        (robot(LINK.format("a"), LINK.format("b"), joint(child="nope")), "child link 'nope'"),
        (robot(LINK.format("a"), LINK.format("b"), joint(kind="hinge")), "unknown joint type"),
        (
            robot(
                LINK.format("a"),
                '<link name="b"><inertial><mass value="-1"/></inertial></link>',
                joint(),
            ),
            "negative mass",
        ),
        (
            robot(
                LINK.format("a"),
                '<link name="b"><inertial><mass value="1"/>'
                '<inertia ixx="-0.1" iyy="0.1" izz="0.1"/></inertial></link>',
                joint(),
            ),
            "not positive semi-definite",
        ),
        (
            robot(
                LINK.format("a"),
                '<link name="b"><inertial><mass value="1"/>'
                '<inertia ixx="0.1" iyy="0.1" izz="0.5"/></inertial></link>',
                joint(),
            ),
            "triangle inequality",
        ),
        (
            robot(LINK.format("a"), LINK.format("b"), joint(extra="<axis xyz='0 0 0'/>")),
            "zero <axis>",
        ),
        (
            robot(
                LINK.format("a"),
                LINK.format("b"),
                LINK.format("c"),
                joint(extra="<axis xyz='0 0 1'/><mimic joint='k'/>"),
                joint(name="k", parent="b", child="c", extra="<mimic joint='j'/>"),
            ),
            "points back at itself",
        ),
        (
            robot(LINK.format("a"), LINK.format("b"), joint(extra="<mimic joint='j'/>")),
            "points back at itself",
        ),
        (
            robot(LINK.format("a"), LINK.format("b"), joint(extra="<mimic joint='ghost'/>")),
            "unknown joint 'ghost'",
        ),
        (
            robot(LINK.format("a"), LINK.format("b"), joint(extra="<origin xyz='0 nan 0'/>")),
            "non-finite",
        ),
        (
            robot(LINK.format("a"), LINK.format("b"), joint(extra="<origin xyz='0 0'/>")),
            "expected 3 numbers",
        ),
        (robot(LINK.format("a"), LINK.format("a")), "defined twice"),
        (
            robot(
                LINK.format("a"),
                LINK.format("b"),
                LINK.format("c"),
                joint(),
                joint(name="k", parent="c", child="b"),
            ),
            "child of two joints",
        ),
    ],
)
def test_bad_urdf_raises_urdf_error_naming_the_problem(xml, words):
    with pytest.raises(URDFError, match=words):
        load_model(xml)


def test_missing_file_is_a_urdf_error(tmp_path):
    with pytest.raises(URDFError, match="does not exist"):
        load_model(tmp_path / "missing.urdf")


def test_a_urdf_path_that_is_no_regular_file_is_refused_at_once(tmp_path):
    """A device or a FIFO named as the URDF would hold the reader (or fill its memory)."""
    fifo = tmp_path / "robot.urdf"
    os.mkfifo(fifo)
    for path in ("/dev/zero", fifo):
        start = time.monotonic()
        with pytest.raises(URDFError, match="not a regular file"):
            load_model(path)
        assert time.monotonic() - start < 2.0


def test_entity_expansion_is_refused_quickly():
    lol = (
        '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
        + "".join(
            f'<!ENTITY lol{i} "{"&lol{};".format(i - 1 if i > 1 else "") * 10}">'
            for i in range(1, 10)
        )
        + ']><robot name="r"><link name="&lol9;"/></robot>'
    )
    start = time.monotonic()
    with pytest.raises(URDFError, match="DTD or entity"):
        load_model(lol)
    assert time.monotonic() - start < 1.0


def test_deep_nesting_does_not_crash():
    xml = "<robot name='r'>" + "<x>" * 50_000 + "</x>" * 50_000 + "<link name='a'/></robot>"
    model = load_model(xml)
    assert model.nv == 0


@pytest.fixture(scope="module")
def model():
    return load_model(kitchen_sink_urdf())


@pytest.mark.parametrize("argument", ["q", "v", "a"])
def test_wrong_length_names_the_argument(model, argument):
    state = {"q": model.neutral_configuration(), "v": np.zeros(model.nv), "a": np.zeros(model.nv)}
    state[argument] = np.zeros(len(state[argument]) + 1)
    with pytest.raises(ValueError, match=rf"^{argument} must have length"):
        D.rnea(model, state["q"], state["v"], state["a"])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_name_the_argument(model, bad):
    q, v = model.neutral_configuration(), np.zeros(model.nv)
    tau = np.zeros(model.nv)
    tau[2] = bad
    with pytest.raises(ValueError, match="tau contains NaN or inf"):
        D.aba(model, q, v, tau)
    q[0] = bad
    with pytest.raises(ValueError, match="q contains NaN or inf"):
        D.gravity(model, q)


def test_non_numeric_and_unknown_link(model):
    with pytest.raises(ValueError, match="q must be an array of numbers"):
        D.crba(model, ["a"] * model.nq)
    q, v = model.neutral_configuration(), np.zeros(model.nv)
    with pytest.raises(ValueError, match="unknown link 'nowhere'"):
        D.rnea(model, q, v, v, {"nowhere": np.zeros(6)})
    with pytest.raises(ValueError, match=r"f_ext\['l2'\] must have length 6"):
        D.rnea(model, q, v, v, {"l2": np.zeros(3)})


def test_coordinate_indices_by_joint_name(model):
    names = ["prop_joint", "j2"]  # after a planar and a free-flyer joint, q and v differ
    assert model.position_indices(names).tolist() == [15, 1]
    assert model.velocity_indices(names).tolist() == [14, 1]
    assert model.velocity_indices([]).tolist() == []
    with pytest.raises(ValueError, match=r"\['nope'\] are not independent joints of model"):
        model.velocity_indices(["j1", "nope"])
    with pytest.raises(ValueError, match=r"\['finger_joint'\] follow the joints they mimic"):
        model.position_indices(["finger_joint"])
    with pytest.raises(ValueError, match=r"\['drone_joint'\] have more than one coordinate"):
        model.velocity_indices(["drone_joint"])


def test_input_checks_name_the_argument():
    class Refused(ValueError):
        pass

    assert finite_vector([[1], [2]], "x", 2).tolist() == [1.0, 2.0]
    with pytest.raises(Refused, match="^x has 3 values, expected 2$"):
        finite_vector([1, 2, 3], "x", 2, Refused)
    with pytest.raises(ValueError, match=r"x contains NaN or inf \(x\[1\] = nan\)"):
        finite_vector([1, np.nan], "x", 2)
    assert check_positive(2, "dt") == 2.0
    for bad in (0.0, -1.0, np.inf, np.nan, "fast", None):
        with pytest.raises(ValueError, match="^dt must be positive and finite, got"):
            check_positive(bad, "dt")
    assert check_choice("rk4", ("euler", "rk4"), "integrator") == "rk4"
    with pytest.raises(Refused, match=r"^integrator must be one of \('euler', 'rk4'\), not 'x'$"):
        check_choice("x", ["euler", "rk4"], "integrator", Refused)
