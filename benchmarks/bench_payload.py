# SPDX-License-Identifier: Apache-2.0
"""The runtime payload effort against the generated kernels and Pinocchio, in one run.

    python benchmarks/bench_payload.py [--quick]

For ur5 and panda with a payload on the default link: single-state ``PayloadEffort.effort``
(τ of the payload at q, q̇, q̈) and ``.gravity``, median µs per call; the generated rnea and
gravity of the model without payload; Pinocchio's rnea and generalized gravity on the model
with the payload. Batched: the payload effort for N = 10,000 states, µs per state. Each row
also reports the largest relative difference of τ_model + τ_payload against Pinocchio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import timeit
from pathlib import Path

import numpy as np
import pinocchio as pin

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "test"))

from pin_oracle import Oracle, random_state, rel_err, robots_dir

from rb_dynamics.dynamics import Payload, PayloadEffort, default_payload_link, make_dynamics
from rb_dynamics.model import load_model

MODELS = {
    "ur5": "ur_description/urdf/ur5_robot.urdf",
    "panda": "panda_description/urdf/panda.urdf",
}
N_BATCH = 10_000


def _us(fn, number: int, repeat: int) -> float:
    return statistics.median(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def _bench(name: str, rel: str, rng, number: int, repeat: int) -> str:
    xml = Path(robots_dir(), rel).read_text()
    model = load_model(xml)
    link = default_payload_link(model)
    payload = Payload(link, 1.7, [0.01, -0.02, 0.07], np.diag([4e-3, 5e-3, 2e-3]))
    effort, kernels = PayloadEffort(model, payload), make_dynamics(model)
    oracle = Oracle(model, xml)
    pm = oracle.pm
    frame = pm.frames[pm.getFrameId(link, pin.BODY)]
    pm.inertias[frame.parentJoint] = pm.inertias[frame.parentJoint] + frame.placement.act(
        pin.Inertia(payload.mass, payload.com, payload.inertia))
    pd = pm.createData()
    q, v, a, _ = random_state(model, rng)
    qp, vp, ap = oracle.q(q), oracle.v(v), oracle.v(a)
    t_effort = _us(lambda: effort.effort(q, v, a), number, repeat)
    t_gravity = _us(lambda: effort.gravity(q), number, repeat)
    t_rnea = _us(lambda: kernels.rnea(q, v, a), number, repeat)
    t_g = _us(lambda: kernels.gravity(q), number, repeat)
    t_pin = _us(lambda: pin.rnea(pm, pd, qp, vp, ap), number, repeat)
    t_pin_g = _us(lambda: pin.computeGeneralizedGravity(pm, pd, qp), number, repeat)
    states = [random_state(model, rng) for _ in range(N_BATCH)]
    Q, V, A = (np.array([s[k] for s in states]) for k in range(3))
    t_batch = _us(lambda: effort.effort(Q, V, A), 1, max(3, repeat // 3)) / N_BATCH
    err = 0.0
    for k in range(0, N_BATCH, N_BATCH // 50):
        ours = kernels.rnea(Q[k], V[k], A[k]) + effort.effort(Q[k], V[k], A[k])
        ref = pin.rnea(pm, pd, oracle.q(Q[k]), oracle.v(V[k]), oracle.v(A[k]))
        err = max(err, rel_err(ours, oracle.from_v(ref)))
    return (f"{name:<7}{t_effort:>13.1f}µs{t_gravity:>9.1f}µs{t_rnea:>9.1f}µs{t_g:>7.1f}µs"
            f"{t_pin:>8.2f}µs{t_pin_g:>6.2f}µs{t_effort / t_pin:>11.1f}×"
            f"{t_gravity / t_pin_g:>9.1f}×"
            f"{t_batch:>11.2f}µs{err:>10.1e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    number, repeat = (500, 5) if args.quick else (3000, 15)
    rng = np.random.default_rng(0)
    print(f"{'model':<7}{'payload effort':>15}{'payload g':>11}{'gen. rnea':>11}{'gen. g':>9}"
          f"{'pin rnea':>10}{'pin g':>8}{'effort/pin':>12}{'g/pin':>10}{'batch/state':>13}"
          f"{'max err':>10}")
    for name, rel in MODELS.items():
        print(_bench(name, rel, rng, number, repeat))


if __name__ == "__main__":
    main()
