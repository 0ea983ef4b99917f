# SPDX-License-Identifier: Apache-2.0
"""Payload identification: mass and COM from noisy resting efforts, all ten inertial parameters
from efforts along a motion, the suggested poses, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest
from test_payload import _xml, random_payload
from urdf_samples import two_link_arm_urdf

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.dynamics import payload as P
from rb_dynamics.dynamics import reference as D
from rb_dynamics.identification import payload as ID
from rb_dynamics.model import load_model


@pytest.mark.parametrize("name", ["default_arm", "panda"])
def test_identify_payload_from_noisy_resting_efforts(name):
    """Efforts = gravity with the payload + a constant offset per joint + 0.05 N·m noise:
    mass within 1 %, COM within 5 mm, and the reported deviations cover the errors."""
    model = load_model(_xml(name))
    link = P.default_payload_link(model)
    for seed in range(5):
        rng = np.random.default_rng(100 + seed)
        payload = P.Payload(link, rng.uniform(0.5, 3.0), rng.uniform(-0.05, 0.05, 3),
                            np.eye(3) * 2e-3)
        poses = ID.suggest_identification_poses(model, link, 40, rng)
        efforts = (D.gravity(P.with_payload(model, payload), poses)
                   + rng.uniform(-1.0, 1.0, model.nv) + rng.normal(0.0, 0.05, poses.shape))
        est = ID.identify_payload(model, poses, efforts, link)
        assert abs(est.mass - payload.mass) <= 0.01 * payload.mass
        assert np.linalg.norm(est.com - payload.com) <= 5e-3
        assert abs(est.mass - payload.mass) <= 5 * est.mass_std
        assert np.all(np.abs(est.com - payload.com) <= 5 * est.com_std)
        assert est.noise_std == pytest.approx(0.05, rel=0.3)
        assert est.condition < 10 and est.n_poses == 40 and est.bias.shape == (model.nv,)
        assert est.as_payload().mass == est.mass


def test_identify_payload_with_reference_efforts_and_without_bias():
    model = load_model(DEFAULT_URDF)
    rng = np.random.default_rng(7)
    payload = P.Payload("tool0", 1.2, [0.01, -0.02, 0.06])
    poses = ID.suggest_identification_poses(model, None, 25, rng)
    offset = rng.uniform(-1.0, 1.0, model.nv)
    # the model's own gravity is 3 % off: the difference of two measurements cancels it
    wrong = D.gravity(model, poses) * 1.03
    empty = wrong + offset + rng.normal(0.0, 0.05, poses.shape)
    loaded = (wrong + P.payload_gravity(model, poses, payload) + offset
              + rng.normal(0.0, 0.05, poses.shape))
    est = ID.identify_payload(model, poses, loaded, reference_efforts=empty)
    assert est.bias is None and est.link == "tool0"
    assert abs(est.mass - 1.2) <= 0.012 and np.linalg.norm(est.com - payload.com) <= 5e-3
    exact = D.gravity(model, poses) + P.payload_gravity(model, poses, payload)
    est = ID.identify_payload(model, poses, exact, bias="none")
    assert abs(est.mass - 1.2) <= 1e-9 and np.linalg.norm(est.com - payload.com) <= 1e-9
    assert est.mass_std > 0  # the noise floor keeps the deviations honest on exact data


def test_identify_payload_refusals():
    model = load_model(DEFAULT_URDF)
    rng = np.random.default_rng(8)
    payload = P.Payload("tool0", 1.0, [0.0, 0.0, 0.05])
    poses = ID.suggest_identification_poses(model, "tool0", 10, rng)
    efforts = D.gravity(P.with_payload(model, payload), poses)
    with pytest.raises(ID.IdentificationError, match="at least 2"):
        ID.identify_payload(model, poses[:1], efforts[:1])
    same = np.repeat(poses[:1], 10, axis=0)
    with pytest.raises(ID.IdentificationError, match="cannot separate"):
        ID.identify_payload(model, same, D.gravity(P.with_payload(model, payload), same))
    spun = np.repeat(poses[:1], 10, axis=0)
    spun[:, 0] = np.linspace(-3, 3, 10)  # turning about the vertical axis shows nothing new
    with pytest.raises(ID.IdentificationError, match="cannot separate"):
        ID.identify_payload(model, spun, D.gravity(P.with_payload(model, payload), spun))
    noisy = D.gravity(model, poses) + rng.normal(0.0, 0.05, poses.shape)
    with pytest.raises(ID.IdentificationError, match="no significant payload"):
        ID.identify_payload(model, poses, noisy)
    two_link = load_model(two_link_arm_urdf(1.0, 1.0, 0.5, 0.25, 0.25, 0.01, 0.01),
                          gravity=(0.0, -9.81, 0.0))
    with pytest.raises(ID.IdentificationError, match="too few poses"):  # 4 equations, 6 unknowns
        ID.identify_payload(two_link, [[0.1, 0.2], [0.5, -0.3]], np.ones((2, 2)), "link2")
    with pytest.raises(ValueError, match="efforts contains NaN"):
        ID.identify_payload(model, poses, np.where(efforts > 0, np.nan, efforts))
    with pytest.raises(ValueError, match="rows"):
        ID.identify_payload(model, poses, efforts[:-1])
    with pytest.raises(ValueError, match="bias must be"):
        ID.identify_payload(model, poses, efforts, bias="linear")
    with pytest.raises(ValueError, match="more than the limit"):
        too_many = np.zeros((ID.MAX_IDENTIFICATION_POSES + 1, model.nq))
        ID.identify_payload(model, too_many, too_many)
    with pytest.raises(ValueError, match="unknown payload link"):
        ID.identify_payload(model, poses, efforts, "hand")


def test_suggested_poses_are_inside_the_limits_and_holdable():
    for name in ("default_arm", "panda"):
        model = load_model(_xml(name))
        poses = ID.suggest_identification_poses(model, count=40, rng=np.random.default_rng(9))
        assert poses.shape == (40, model.nq)
        assert np.all(poses >= model.position_lower) and np.all(poses <= model.position_upper)
        assert np.all(np.abs(D.gravity(model, poses)) <= 0.8 * model.effort_limit)
        assert len({tuple(p) for p in poses}) == 40
    with pytest.raises(ValueError, match="count must be"):
        ID.suggest_identification_poses(model, count=1)


def exciting_motion(model, n: int, duration: float, rng):
    """Three harmonics per joint around the middle of its range, with exact q̇ and q̈."""
    lower = np.where(np.isfinite(model.position_lower), model.position_lower, -np.pi)
    upper = np.where(np.isfinite(model.position_upper), model.position_upper, np.pi)
    t = np.linspace(0.0, duration, n)[:, None]
    q = np.tile(0.5 * (lower + upper), (n, 1))
    v, a = np.zeros_like(q), np.zeros_like(q)
    for h in range(1, 4):
        amp = np.minimum(0.9, 0.15 * (upper - lower)) / h * rng.uniform(0.5, 1.0, model.nv)
        w = 2 * np.pi * h * rng.uniform(0.15, 0.3, model.nv)
        phase = rng.uniform(0, 2 * np.pi, model.nv)
        q += amp * np.sin(w * t + phase)
        v += amp * w * np.cos(w * t + phase)
        a -= amp * w**2 * np.sin(w * t + phase)
    return q, v, a


@pytest.mark.parametrize("name", ["default_arm", "panda"])
def test_identify_payload_inertia_from_motion(name):
    """Efforts along an exciting motion = rnea with the payload + offset + viscous and Coulomb
    friction + 0.05 N·m noise: all ten parameters; a 3 kg box of 30×20×10 cm, turned, has its
    inertia (~0.04 kg·m²) within 5 %, each parameter within 5 of its standard deviations."""
    model = load_model(_xml(name))
    link = P.default_payload_link(model)
    rng = np.random.default_rng(10)
    q, v, a = exciting_motion(model, 2000, 20.0, rng)
    R = np.linalg.qr(rng.normal(size=(3, 3)))[0]
    box = 3.0 / 12 * np.diag([0.2**2 + 0.1**2, 0.3**2 + 0.1**2, 0.3**2 + 0.2**2])
    payload = P.Payload(link, 3.0, [0.03, -0.02, 0.06], R @ box @ R.T)
    efforts = (D.rnea(P.with_payload(model, payload), q, v, a) + rng.uniform(-1, 1, model.nv)
               + model.damping * v + model.friction * np.sign(v)
               + rng.normal(0.0, 0.05, q.shape))
    est = ID.identify_payload_inertia(model, q, v, a, efforts, link)
    assert abs(est.mass - payload.mass) <= 0.01 * payload.mass
    assert np.linalg.norm(est.com - payload.com) <= 5e-3
    assert np.linalg.norm(est.inertia - payload.inertia) <= 0.05 * np.linalg.norm(payload.inertia)
    truth = payload.inertial_parameters()
    assert np.all(np.abs(est.parameters - truth) <= 5 * est.parameters_std)
    assert est.friction.shape == (model.nv, 3)
    arm = [vi for vi, kind in zip(model.joint_v_index, model.joint_kinds) if kind == "revolute"]
    assert np.allclose(est.friction[arm, 1], model.damping[arm], atol=0.05)  # viscous
    assert est.as_payload().mass == est.mass
    # the same motion without the payload, measured: the difference needs no friction model
    empty = (D.rnea(model, q, v, a) * 1.02 + model.damping * v
             + rng.normal(0.0, 0.05, q.shape))
    loaded = empty + P.payload_wrench_effort(model, q, v, a, payload)
    est = ID.identify_payload_inertia(model, q, v, a, loaded, link, reference_efforts=empty)
    assert est.friction is None
    assert abs(est.mass - payload.mass) <= 1e-9 * payload.mass


def test_identify_payload_inertia_refuses_resting_data():
    model = load_model(DEFAULT_URDF)
    rng = np.random.default_rng(11)
    poses = ID.suggest_identification_poses(model, "tool0", 30, rng)
    payload = random_payload("tool0", rng)
    zero = np.zeros_like(poses)
    efforts = D.gravity(P.with_payload(model, payload), poses)
    with pytest.raises(ID.IdentificationError, match="never depend on Ixx.*identify_payload"):
        ID.identify_payload_inertia(model, poses, zero, zero, efforts, "tool0")
    with pytest.raises(ValueError, match="same number of rows"):
        ID.identify_payload_inertia(model, poses, zero[:-1], zero, efforts)
    with pytest.raises(ValueError, match="bias must be one of"):
        ID.identify_payload_inertia(model, poses, zero, zero, efforts, bias="per_joint")
