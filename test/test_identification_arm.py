# SPDX-License-Identifier: Apache-2.0
"""Identification of the whole arm, without ROS: the regressor against RNEA and Pinocchio, the
base parameter counts against an independent rank (Pinocchio's regressor, SVD), exact recovery
from ideal data, the consistent (SDP) set, the excitation within its limits, the refusals of
bad recordings, and the package importing without its optional extra."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest
from pin_oracle import REAL_ROBOTS, robots_dir

from rb_dynamics import DEFAULT_URDF
from rb_dynamics.dynamics import crba, friction_effort, gravity, rnea
from rb_dynamics.identification import (
    JOINT_TERMS,
    FourierTrajectory,
    IdentificationError,
    JointRecording,
    ParameterLayout,
    RecordingError,
    SensorModel,
    base_parameters,
    consistent_parameters,
    fit_base_parameters,
    identify,
    periodic_data,
    perturbed_model,
    plan_excitation,
    pseudo_inertia,
    random_states,
    synthetic_recording,
    write_identification,
)
from rb_dynamics.model import load_model, read_overlay

ALL_TERMS = ("armature", "viscous", "coulomb", "offset")
PANDA_ARM = tuple(f"panda_joint{k}" for k in range(1, 8))


def _robot(name: str):
    if name == "default_arm":
        text = Path(DEFAULT_URDF).read_text()
        return text, load_model(text), None
    text = Path(robots_dir(), REAL_ROBOTS[name][0]).read_text()
    return text, load_model(text), PANDA_ARM if name == "panda" else None


@pytest.fixture(scope="module")
def arm_plan():
    """A short excitation of the bundled arm (2 s period, 3 harmonics)."""
    text, model, _ = _robot("default_arm")
    base = base_parameters(ParameterLayout(model, (), ALL_TERMS))
    return text, model, base, plan_excitation(base, period=2.0, harmonics=3, time_budget=3.0,
                                              starts=1)


@pytest.mark.parametrize("name", ["default_arm", "ur5", "panda"])
def test_regressor_times_parameters_is_rnea_and_matches_pinocchio(name):
    text, model, joints = _robot(name)
    layout = ParameterLayout(model, joints or (), ())
    rng = np.random.default_rng(5)
    q, v, a = random_states(layout, 25, rng)
    Y = layout.regressor(q, v, a)
    Q, V, A = layout.full_state(q, v, a)
    tau = rnea(model, Q, V, A)[:, layout.v_index]
    assert np.abs(Y @ layout.parameters() - tau).max() <= 1e-12 * np.abs(tau).max()
    # with armature, friction (Stribeck at the layout's v_s) and offsets: the engine's rnea
    # (armature included) + its friction law + the offset
    full = ParameterLayout(model, joints or (), JOINT_TERMS, stribeck_velocity=0.07)
    true = perturbed_model(model, rng, joints=full.joints, stribeck=True)
    true.stribeck_velocity[full.v_index] = 0.07
    expected = (rnea(true, Q, V, A) + friction_effort(true, V))[:, full.v_index] + \
        true.effort_offset[full.v_index]
    got = full.regressor(q, v, a) @ full.parameters(true)
    assert np.abs(got - expected).max() <= 1e-12 * np.abs(expected).max()
    # Pinocchio's joint-torque regressor, body by body (its joints are in our body order)
    pmodel = pin.buildModelFromXML(text)
    data = pmodel.createData()
    for k in range(len(q)):
        qp = pin.neutral(pmodel)
        qp[:model.nq] = Q[k]
        vp, ap = np.zeros(pmodel.nv), np.zeros(pmodel.nv)
        vp[:model.nv], ap[:model.nv] = V[k], A[k]
        Yp = pin.computeJointTorqueRegressor(pmodel, data, qp, vp, ap)[layout.v_index]
        ours = Y[k][:, :layout.n_inertial]
        assert np.abs(ours - Yp[:, :ours.shape[1]]).max() <= 1e-9 * max(np.abs(Yp).max(), 1.0)


def _independent_rank(text: str, model, joints, terms) -> int:
    """Rank of Pinocchio's stacked regressor plus the joint columns, by SVD (columns scaled;
    a column 1e-10 of the largest is a zero with rounding: Panda's link-2 m·c_z, along the
    axis of joint 2, which no joint feels, comes out at 1e-16 and would count once scaled)."""
    pmodel = pin.buildModelFromXML(text)
    data = pmodel.createData()
    layout = ParameterLayout(model, joints or (), terms)
    rng = np.random.default_rng(11)
    q, v, a = random_states(layout, 120, rng)
    Q, V, A = layout.full_state(q, v, a)
    rows = []
    for k in range(len(q)):
        qp = pin.neutral(pmodel)
        qp[:model.nq] = Q[k]
        vp, ap = np.zeros(pmodel.nv), np.zeros(pmodel.nv)
        vp[:model.nv], ap[:model.nv] = V[k], A[k]
        Yp = pin.computeJointTorqueRegressor(pmodel, data, qp, vp, ap)[layout.v_index]
        joint_columns = layout.regressor(q[k:k + 1], v[k:k + 1], a[k:k + 1])[0][
            :, layout.n_inertial:]
        rows.append(np.hstack([Yp, joint_columns]))
    W = np.vstack(rows)
    norms = np.linalg.norm(W, axis=0)
    kept = norms > 1e-10 * norms.max()  # the rest are exact zeros with rounding
    s = np.linalg.svd(W[:, kept] / norms[kept], compute_uv=False)
    return int(np.sum(s > 1e-6 * s[0]))


@pytest.mark.parametrize("name, counts", [
    ("ur5", (36, 40, 58)),
    ("panda", (43, 48, 69)),  # the 7 arm joints moving, the fingers held
    ("default_arm", (36, 40, 58)),
])
def test_base_parameter_counts_equal_an_independent_rank(name, counts):
    text, model, joints = _robot(name)
    for terms, expected in zip(((), ("armature",), ALL_TERMS), counts):
        base = base_parameters(ParameterLayout(model, joints or (), terms))
        assert base.count == expected == _independent_rank(text, model, joints, terms), terms
        assert base.strength.min() > 1e-3  # the kept directions are far from the tolerance


def test_a_rounded_half_pi_adds_no_spurious_base_parameter():
    """UR5's URDF writes π/2 as 1.57079632679: the axes are off by ~1e-11 rad, which leaves a
    singular value near 1e-10 that the rank tolerance must not count."""
    text, model, _ = _robot("ur5")
    assert "1.57079632679" in text
    exact = text.replace("1.57079632679", repr(np.pi / 2))
    for source in (text, exact):
        base = base_parameters(ParameterLayout(load_model(source), (), ALL_TERMS))
        assert base.count == 58


def test_a_urdf_rounding_its_angles_to_4_digits_adds_no_base_parameter(tmp_path):
    """The xArm7's URDF writes π/2 as 1.5708 (axes off by 3.7e-6 rad, a diagonal of 3.8e-6 in
    the basis): 69 base parameters, not 70; its plan is well conditioned, and the same command
    with the same seed writes the same files."""
    text = Path(robots_dir(), "xarm_description/urdf/xarm7.urdf").read_text()
    assert 'rpy="-1.5708 0 0"' in text
    model = load_model(text)
    counts = [base_parameters(ParameterLayout(model, (), terms)).count
              for terms in ((), ("armature",), ALL_TERMS)]
    assert counts == [43, 48, 69]  # as the same arm with π/2 exact
    exact = load_model(text.replace("1.5708", repr(np.pi / 2)))
    assert base_parameters(ParameterLayout(exact, (), ALL_TERMS)).count == 69
    urdf = tmp_path / "xarm7.urdf"
    urdf.write_text(text)
    plans = []
    for k in range(2):
        out = tmp_path / f"plan{k}"
        ran = subprocess.run([sys.executable, "-m", "rb_dynamics.ros.identification", "plan",
                              "--urdf", str(urdf), "--out", str(out), "--period", "4",
                              "--harmonics", "4", "--evaluations", "400", "--seed", "3"],
                             capture_output=True, text=True, timeout=600)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert "cut the search" not in ran.stderr
        plans.append(out)
    report = json.loads((plans[0] / "plan.json").read_text())["report"]
    assert report["condition"] < 1e4 and not report["cut_by_time"]
    for name in ("plan.json", "excitation.yaml"):
        assert (plans[0] / name).read_bytes() == (plans[1] / name).read_bytes(), name


def test_ideal_data_recovers_the_base_parameters(arm_plan):
    """Exact states, no noise, no delay: β to 1e-9 relative through the whole preprocessing."""
    _, model, base, plan = arm_plan
    true = perturbed_model(model, np.random.default_rng(2))
    recording, _ = synthetic_recording(true, plan.trajectory, 4, SensorModel(),
                                       np.random.default_rng(3))
    data = periodic_data(recording, plan.trajectory.period, 1.0, 4)
    fit = fit_base_parameters(base, data, delay=0.0)
    truth = base.project(base.layout.parameters(true))
    assert np.linalg.norm(fit.beta - truth) <= 1e-9 * np.linalg.norm(truth)


def test_excitation_keeps_its_limits_and_is_well_conditioned(arm_plan):
    _, model, base, plan = arm_plan
    t = np.linspace(0.0, plan.trajectory.period, 4001)
    q, qd, qdd = plan.trajectory.evaluate(t)
    lim = plan.limits
    assert np.all(q >= lim.lower - 1e-9) and np.all(q <= lim.upper + 1e-9)
    assert np.all(np.abs(qd) <= lim.velocity + 1e-9)
    assert np.all(np.abs(qdd) <= lim.acceleration + 1e-9)
    layout = base.layout
    tau = layout.regressor(q, qd, qdd) @ layout.parameters()
    assert np.all(np.abs(tau).max(axis=0) <= lim.effort * (1 + 1e-6))
    assert np.all(lim.velocity < model.velocity_limit) and np.all(lim.effort < model.effort_limit)
    # at rest at the start and end of each period, so it can be entered and repeated
    assert np.abs(qd[[0, -1]]).max() < 1e-9 and np.abs(qdd[[0, -1]]).max() < 1e-9
    # a 2 s period leaves the velocities little room to grow; the 10 s plans of the benchmark
    # (benchmarks/bench_identification.py) reach ≤ 100
    assert plan.condition < 1000


def test_realistic_fit_consistent_set_and_outputs(arm_plan, tmp_path):
    """Noise, jitter and a 2 ms delay: the delay found, the validation at the noise, the
    consistent set physical and as good, the files written and the URDF loading back."""
    text, model, _, plan = arm_plan
    rng = np.random.default_rng(7)
    true = perturbed_model(model, rng)
    sensor = SensorModel(jitter=1e-4, delay=0.002, noise=0.05, noise_relative=0.01)
    recording, sigma = synthetic_recording(true, plan.trajectory, 6, sensor, rng)
    ident = identify(text, recording, plan.trajectory)
    assert abs(ident.fit.delay - 0.002) < 2e-4
    true_sigma = np.sqrt(np.mean(sigma ** 2, axis=0))
    assert np.all(ident.validation.rms <= 1.25 * true_sigma)
    cons = ident.consistent
    assert cons.status == "optimal" and np.all(cons.min_eigenvalue > 0)
    assert np.all(ident.consistent_validation.rms <= 1.02 * ident.validation.rms)
    for b in range(model.n_bodies):  # the bodies (welded links included) are physical
        assert np.linalg.eigvalsh(pseudo_inertia(cons.theta[10 * b:10 * b + 10]))[0] > 0
    q = np.random.default_rng(1).uniform(-3, 3, (10_000, model.nq))
    assert np.linalg.eigvalsh(crba(ident.model, q)).min() > 0  # M(q) + diag(armature)
    g_true = gravity(true, q[:500])
    assert np.abs(gravity(ident.model, q[:500]) - g_true).max() <= 0.01 * np.abs(g_true).max()

    paths = write_identification(ident, tmp_path / "out", {"bag": "synthetic"})
    report = json.loads(paths["report"].read_text())
    assert report["base_parameters"] == 58 and report["consistent"]["status"] == "optimal"
    overlay = read_overlay(paths["overlay"])
    assert set(overlay.joints) == set(model.actuated_joint_names)
    assert overlay.covariance.shape == (58, 58) and overlay.provenance["bag"] == "synthetic"
    corrected = load_model(paths["urdf"].read_text())
    assert np.abs(gravity(corrected, q[:50]) - gravity(ident.model, q[:50])).max() < 1e-6
    assert np.allclose(corrected.damping, ident.model.damping, rtol=1e-8)
    assert paths["plot"].stat().st_size > 10_000


def test_consistent_set_with_the_exact_base_parameters_is_the_truth_s_equivalent(arm_plan):
    """From exact data the SDP keeps the identified base parameters (the truth is feasible)."""
    _, model, base, plan = arm_plan
    true = perturbed_model(model, np.random.default_rng(4))
    recording, _ = synthetic_recording(true, plan.trajectory, 3, SensorModel(),
                                       np.random.default_rng(5))
    data = periodic_data(recording, plan.trajectory.period, 1.0, 3)
    fit = fit_base_parameters(base, data, delay=0.0)
    cons = consistent_parameters(fit)
    truth = base.project(base.layout.parameters(true))
    assert np.linalg.norm(cons.beta - truth) <= 1e-4 * np.linalg.norm(truth)


# ----------------------------------------------------------------------------- refusals


def _recording(plan, model, periods=4, **changes):
    rec, _ = synthetic_recording(perturbed_model(model, np.random.default_rng(9)),
                                 plan.trajectory, periods, SensorModel(noise=0.01),
                                 np.random.default_rng(10))
    fields = {"joints": rec.joints, "stamps": rec.stamps, "position": rec.position,
              "effort": rec.effort, "velocity": rec.velocity}
    fields.update(changes)
    return JointRecording.checked(source="test bag", **fields)


def test_bad_recordings_are_refused_with_the_cause(arm_plan, tmp_path):
    text, model, _, plan = arm_plan
    good = _recording(plan, model)
    with pytest.raises(RecordingError, match="no joint efforts recorded"):
        _recording(plan, model, effort=None)
    nan = good.effort.copy()
    nan[500, 2] = np.nan
    with pytest.raises(RecordingError, match="effort of joint 'elbow_joint' is nan"):
        _recording(plan, model, effort=nan)
    stamps = good.stamps.copy()
    stamps[700] = stamps[699]
    with pytest.raises(RecordingError, match="stamps are not increasing: sample 700"):
        _recording(plan, model, stamps=stamps)
    with pytest.raises(RecordingError, match="only 50 joint states"):
        _recording(plan, model, stamps=good.stamps[:50], position=good.position[:50],
                   effort=good.effort[:50], velocity=good.velocity[:50])
    short = _recording(plan, model, periods=2)
    out = tmp_path / "out"
    with pytest.raises(RecordingError, match=r"too short: \d whole period"):
        identify(text, short, plan.trajectory)
    # the recording of another motion (sines and cosines swapped) does not follow the plan,
    # nor does an arm that stood still
    other = FourierTrajectory(plan.trajectory.joints, plan.trajectory.period,
                              plan.trajectory.q0 + 0.5, plan.trajectory.b, plan.trajectory.a)
    with pytest.raises(RecordingError, match="does not follow the planned excitation"):
        identify(text, _recording(dataclasses.replace(plan, trajectory=other), model),
                 plan.trajectory)
    still = np.tile(good.position[0], (len(good.stamps), 1)) + \
        1e-4 * np.random.default_rng(3).standard_normal(good.position.shape)
    with pytest.raises(RecordingError, match=r"correlates 0\.\d+ with the plan"):
        identify(text, _recording(plan, model, position=still), plan.trajectory)
    # a plan file whose coefficients are all zero
    idle = FourierTrajectory(plan.trajectory.joints, plan.trajectory.period,
                             plan.trajectory.q0, 0 * plan.trajectory.a, 0 * plan.trajectory.b)
    with pytest.raises(RecordingError, match="the plan moves no joint"):
        identify(text, good, idle)
    assert not out.exists()


def test_a_recording_that_repeats_the_excitation_off_the_plan_is_fitted(arm_plan):
    """An arm whose model lacks its armature repeats the excitation with the wrist ranges
    wrong and off-centre: what it recorded is what the fit fits (the plan only says where the
    periods are), aligned where the plan starts, and ``execution`` says how far it was."""
    text, model, _, plan = arm_plan
    rng = np.random.default_rng(7)
    true = perturbed_model(model, rng)
    scale = np.array([1.0, 1.0, 1.0, 2.2, 0.4, 1.8])  # per joint: range recorded / planned
    tr = plan.trajectory
    executed = FourierTrajectory(tr.joints, tr.period, tr.q0 + np.r_[0, 0, 0, 0.3, -0.2, 0.4],
                                 tr.a * scale[:, None], tr.b * scale[:, None])
    recording, sigma = synthetic_recording(true, executed, 6, SensorModel(noise=0.05), rng)
    ident = identify(text, recording, tr)
    on_plan = identify(text, synthetic_recording(true, tr, 6, SensorModel(noise=0.05), rng)[0],
                       tr)
    assert abs(ident.data.start - on_plan.data.start) < 1e-9  # the same periods
    np.testing.assert_allclose(ident.execution.range, scale, rtol=0.02)
    true_sigma = np.sqrt(np.mean(sigma ** 2, axis=0))
    assert np.all(ident.validation.rms <= 1.25 * true_sigma)
    q = np.random.default_rng(1).uniform(-3, 3, (500, model.nq))
    g_true = gravity(true, q)
    assert np.abs(gravity(ident.model, q) - g_true).max() <= 0.01 * np.abs(g_true).max()


def test_data_that_cannot_excite_the_parameters_name_the_combination(arm_plan):
    """The wrist_3 joint held still: its friction and armature cannot be told apart; the error
    names the least-determined combination."""
    text, model, base, plan = arm_plan
    traj = plan.trajectory
    still = np.ones(len(traj.joints))
    still[-1] = 0.0
    lazy = traj.scaled(still)
    recording = _recording(dataclasses.replace(plan, trajectory=lazy), model)
    with pytest.raises(IdentificationError, match=r"cannot determine the parameters.*"
                       r"wrist_3_joint"):
        identify(text, recording, lazy)


def test_the_package_imports_without_its_optional_extra():
    """The engine, the control node's modules and rb_dynamics.identification import without
    rosbags, cvxpy and clarabel; using the SDP then says what to install."""
    code = (
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('rosbags', 'cvxpy', 'clarabel'):\n"
        "            raise ImportError('hidden: ' + name)\n"
        "sys.meta_path.insert(0, Hide())\n"
        "import rb_dynamics.identification as I, rb_dynamics.dynamics, rb_dynamics.control\n"
        "import rb_dynamics.ros.control_node.node\n"
        "try:\n"
        "    I.require('cvxpy', 'the consistent parameter set')\n"
        "except I.MissingDependency as exc:\n"
        "    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "needs the Python package 'cvxpy'" in out.stdout
    assert "pip install rosbags cvxpy clarabel" in out.stdout
