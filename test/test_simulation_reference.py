# SPDX-License-Identifier: Apache-2.0
"""Reference cases for the simulator: the [PP] chains against Pinocchio integrated the same
way, and the energy of a free panda over 10 s."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest
from pin_oracle import REAL_ROBOTS, robots_dir

from rb_dynamics.dynamics import make_dynamics
from rb_dynamics.dynamics import reference as D
from rb_dynamics.model import load_model
from rb_dynamics.simulation import step

ROD = 'ixx="8.333e-4" iyy="1e-6" izz="8.333e-4" ixy="0" ixz="0" iyz="0"'  # 1 kg, 10 cm rod
UNIT = 'ixx="1" iyy="1" izz="1" ixy="0" ixz="0" iyz="0"'  # the [PP] case's M[i] = Id(6)


def chain_urdf(n: int, alternate: bool, inertia: str = ROD) -> str:
    """n links of 10 cm and 1 kg along y (horizontal), revolute joints about x (or alternately
    x and z), COM at the middle of each link; gravity −z."""
    parts = ['<robot name="chain"><link name="base"/>']
    for i in range(1, n + 1):
        axis = "0 0 1" if alternate and i % 2 == 0 else "1 0 0"
        parent = "base" if i == 1 else f"link{i - 1}"
        y = 0.0 if i == 1 else 0.1
        parts.append(f'<link name="link{i}"><inertial><origin xyz="0 0.05 0"/>'
                     f'<mass value="1"/><inertia {inertia}/></inertial></link>'
                     f'<joint name="j{i}" type="revolute"><parent link="{parent}"/>'
                     f'<child link="link{i}"/><origin xyz="0 {y} 0"/><axis xyz="{axis}"/>'
                     '<limit lower="-1000" upper="1000" effort="100" velocity="1000"/>'
                     "</joint>")
    return "".join(parts) + "</robot>"


def _rk4(f, q, v, dt):
    a1 = f(q, v)
    a2 = f(q + 0.5 * dt * v, v + 0.5 * dt * a1)
    a3 = f(q + 0.5 * dt * (v + 0.5 * dt * a1), v + 0.5 * dt * a2)
    a4 = f(q + dt * (v + 0.5 * dt * a2), v + dt * a3)
    v2, v3, v4 = v + 0.5 * dt * a1, v + 0.5 * dt * a2, v + dt * a3
    return q + dt / 6 * (v + 2 * v2 + 2 * v3 + v4), v + dt / 6 * (a1 + 2 * a2 + 2 * a3 + a4)


@pytest.mark.parametrize("n, alternate, inertia", [
    (4, False, ROD), (4, False, UNIT), (10, True, ROD)],
    ids=["pp_4link", "pp_4link_unit_inertia", "10dof_alternating"])
def test_falling_chain_agrees_with_pinocchio_integrated_the_same_way(n, alternate, inertia):
    """Zero torque, from rest and horizontal; ours (step, RK4, 1 ms) against pin.aba under the
    same RK4: the tip link's COM height agrees within 1e-6 m over 2 s (checked every 20 ms)."""
    xml = chain_urdf(n, alternate, inertia)
    model = load_model(xml)
    pm = pin.buildModelFromXML(xml)
    pd = pm.createData()
    assert pm.nq == model.nq == n and model.joint_names == [f"j{i}" for i in range(1, n + 1)]
    fast = make_dynamics(model)
    tip = f"link{n}"
    fid = pm.getFrameId(tip, pin.BODY)

    def pin_accel(q, v):
        return pin.aba(pm, pd, q, v, np.zeros(n))

    q_ours, v_ours = np.zeros(n), np.zeros(n)
    q_pin, v_pin = np.zeros(n), np.zeros(n)
    dt, worst, lowest = 1e-3, 0.0, 0.0
    com_local = np.array([0.0, 0.05, 0.0])
    for k in range(2000):
        s = step(fast, q_ours, v_ours, np.zeros(n), dt, "rk4", losses=False,
                 limits=False)
        q_ours, v_ours = s.q, s.v
        q_pin, v_pin = _rk4(pin_accel, q_pin, v_pin, dt)
        if k % 20 == 19:
            T = D.link_pose(model, q_ours, tip)
            ours = (T[:3, :3] @ com_local + T[:3, 3])[2]
            pin.framesForwardKinematics(pm, pd, q_pin)
            ref = pd.oMf[fid].act(com_local)[2]
            worst, lowest = max(worst, abs(ours - ref)), min(lowest, ref)
    print(f"\ntest_falling_chain_agrees_with_pinocchio_integrated_the_same_way: worst {worst:.2e}")
    assert worst <= 1e-6, worst
    assert lowest < -0.1  # it really fell (from z = 0)


def test_free_panda_keeps_its_energy_for_10_s_with_rk4():
    """Torque-free, loss-free panda arm, RK4 at 1 ms for 10 s: |ΔE|/|E| ≤ 1e-6.

    The fingers are welded: free prismatic fingers without stops are flung hundreds of metres
    out as the arm whirls (joint speeds reach ~70 rad/s), a model artefact, not a test of the
    integrator.
    """
    xml = Path(robots_dir(), REAL_ROBOTS["panda"][0]).read_text()
    xml = re.sub(r'(<joint name="panda_finger_joint\d" type=")prismatic(")', r"\1fixed\2", xml)
    model = load_model(xml)
    fast = make_dynamics(model)
    q = np.array([0.0, -0.4, 0.0, -2.0, 0.0, 1.6, 0.8])
    v = np.array([0.3, -0.2, 0.4, 0.1, -0.5, 0.2, 0.6])
    zero = np.zeros(model.nv)

    def energy(q, v):
        return D.kinetic_energy(model, q, v) + D.potential_energy(model, q)

    e0, worst = energy(q, v), 0.0
    for k in range(10_000):
        s = step(fast, q, v, zero, 1e-3, "rk4", losses=False,
                 limits=False)
        q, v = s.q, s.v
        if k % 100 == 99:
            worst = max(worst, abs(energy(q, v) - e0) / abs(e0))
    print(f"\ntest_free_panda_keeps_its_energy_for_10_s_with_rk4: worst {worst:.2e}")
    assert worst <= 1e-6, worst


@pytest.mark.parametrize("n, alternate", [(4, False), (10, True)])
def test_roll_out_agrees_with_mujoco(n, alternate):
    """MuJoCo loads the same URDF; with its RK4 at 1 ms the joint angles agree to ~1e-11 rad
    over 2 s (no contacts, no armature, no joint damping on either side)."""
    mujoco = pytest.importorskip("mujoco")
    xml = chain_urdf(n, alternate)
    mj_model = mujoco.MjModel.from_xml_string(xml)
    mj_model.opt.timestep = 1e-3
    mj_model.opt.integrator = mujoco.mjtIntegrator.mjINT_RK4
    mj_data = mujoco.MjData(mj_model)
    model = load_model(xml)
    fast = make_dynamics(model)
    q, v, worst = np.zeros(n), np.zeros(n), 0.0
    for _ in range(2000):
        mujoco.mj_step(mj_model, mj_data)
        s = step(fast, q, v, np.zeros(n), 1e-3, "rk4", losses=False,
                 limits=False)
        q, v = s.q, s.v
        worst = max(worst, float(np.abs(mj_data.qpos - q).max()))
    print(f"\ntest_roll_out_agrees_with_mujoco: worst {worst:.2e}")
    assert worst < 1e-8, worst
