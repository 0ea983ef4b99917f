# SPDX-License-Identifier: Apache-2.0
"""The paper's computing-time comparison ([Z23] in docs/conventions.md): 60 s of the
omnidirectional robot and of the space robot with the Udwadia–Kalaba equation and with the
extended Rosenberg embedding, same integrator (DOP853, rtol = atol = 1e-10), plus one solve.

    python benchmarks/bench_constraints.py
"""

from __future__ import annotations

import sys
import time
import timeit
from pathlib import Path

import numpy as np
from scipy.integrate import solve_ivp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "test"))
from constrained_robots import (  # noqa: E402
    OMNI_Q0,
    OMNI_V0,
    SPACE_Q0,
    SPACE_V0,
    omni_robot_terms,
    space_robot_terms,
)

from rb_dynamics.dynamics import rosenberg, udwadia_kalaba  # noqa: E402


def simulate(terms, q0, v0, solver) -> tuple[float, int]:
    n = len(q0)
    calls = [0]

    def rhs(_t, x):
        calls[0] += 1
        M, F, A, b = terms(x[:n], x[n:])
        return np.concatenate([x[n:], solver(M, F, A, b)[0]])

    start = time.perf_counter()
    solve_ivp(rhs, (0, 60), np.concatenate([q0, v0]), method="DOP853", rtol=1e-10, atol=1e-10)
    return time.perf_counter() - start, calls[0]


def main() -> int:
    M, _, A, _ = omni_robot_terms(OMNI_Q0, OMNI_V0)
    Minv_At = np.linalg.solve(M, A.T)
    omni_v0 = OMNI_V0 - Minv_At @ np.linalg.solve(A @ Minv_At, A @ OMNI_V0)
    cases = {"omnidirectional robot": (omni_robot_terms, OMNI_Q0, omni_v0),
             "space robot": (space_robot_terms, SPACE_Q0, SPACE_V0)}
    print(f"{'robot':<24}{'method':<18}{'60 s run (s)':>14}{'rhs calls':>11}"
          f"{'one solve (µs)':>16}")
    for name, (terms, q0, v0) in cases.items():
        times = {}
        for label, solver in (("Udwadia–Kalaba", udwadia_kalaba), ("ext. Rosenberg", rosenberg)):
            seconds, calls = simulate(terms, q0, v0, solver)
            M, F, A, b = terms(q0, v0)
            solve = min(timeit.repeat("solver(M, F, A, b)", number=200, repeat=5, globals={
                "solver": solver, "M": M, "F": F, "A": A, "b": b})) / 200
            times[label] = seconds
            print(f"{name:<24}{label:<18}{seconds:>14.3f}{calls:>11}{solve * 1e6:>16.1f}")
        print(f"{'':<24}UK / Rosenberg time ratio: "
              f"{times['Udwadia–Kalaba'] / times['ext. Rosenberg']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
