# SPDX-License-Identifier: Apache-2.0
"""C kernels (codegen_c, kernel_cache, the _ckernels trampoline) against the Python kernels
and Pinocchio, and their build, cache and fallback behaviour.

Accuracy: ur5, panda (mimic finger), solo12 and talos (free-flyer roots) and the kitchen-sink
URDF, random states, one state and batched: C vs Python kernels ≤ 1e-12 relative, C vs
Pinocchio ≤ 1e-9. Build: real compiler runs (a recording wrapper around the system compiler
counts them) in fresh processes, each test with a cache directory of its own
(``RB_DYNAMICS_CACHE``), so nothing depends on the user's cache.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gil_probe import ticks_during
from pin_oracle import (
    REAL_ROBOTS,
    Oracle,
    WorstErrors,
    load_case,
    oracle_models,
    random_state,
    rel_err,
    robots_dir,
)
from urdf_samples import kitchen_sink_urdf

from rb_dynamics.dynamics import (
    KernelBuildError,
    LiveDynamics,
    kernel_cache,
    make_dynamics,
)
from rb_dynamics.dynamics import reference as D
from rb_dynamics.model import load_model

ROOT = Path(__file__).resolve().parents[1]
COMPILER = shutil.which(os.environ.get("CC", "cc").split()[0]) or shutil.which("gcc")
pytestmark = pytest.mark.skipif(
    kernel_cache._ckernels is None or COMPILER is None,
    reason="needs the built extension dynamics.trampoline._ckernels and a C compiler")

TOL_PYTHON, TOL_PIN = 1e-12, 1e-9
N_STATES = 40
WORST = WorstErrors()
KERNELS = ("rnea", "gravity", "nle", "crba", "aba")


_record = WORST.record


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    WORST.report("C kernels")


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory):
    """One cache for the accuracy tests (each model compiles once), never the user's."""
    with pytest.MonkeyPatch.context() as mp:
        path = tmp_path_factory.mktemp("kernels")
        mp.setenv("RB_DYNAMICS_CACHE", str(path))
        mp.delenv("RB_DYNAMICS_KERNELS", raising=False)
        yield path


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    path = tmp_path / "cache"
    monkeypatch.setenv("RB_DYNAMICS_CACHE", str(path))
    monkeypatch.delenv("RB_DYNAMICS_KERNELS", raising=False)
    return path


@pytest.fixture(scope="module", params=oracle_models())
def case(request, module_cache):
    name, model, xml = load_case(request.param)
    rng = np.random.default_rng(17)
    states = [random_state(model, rng) for _ in range(N_STATES)]
    fast_c = make_dynamics(model, kernels="c")
    return name, model, Oracle(model, xml), fast_c, make_dynamics(model, "python"), states


def _calls(fast, q, v, a, tau) -> dict[str, np.ndarray]:
    return {"rnea": fast.rnea(q, v, a), "gravity": fast.gravity(q),
            "nle": fast.nonlinear_effects(q, v), "crba": fast.crba(q), "aba": fast.aba(q, v, tau)}


# ----------------------------------------------------------------------------- accuracy


def test_single_state_matches_python_kernels_and_pinocchio(case):
    name, model, oracle, fast_c, fast_py, states = case
    assert fast_c.kind == "c" and fast_py.kind == "python" and fast_c.model is model
    identical = 0
    for q, v, a, tau in states:
        ours, theirs = _calls(fast_c, q, v, a, tau), _calls(fast_py, q, v, a, tau)
        for key, ref in oracle.references(q, v, a, tau).items():
            assert ours[key].shape == theirs[key].shape
            _record(name, f"{key} vs python", rel_err(ours[key], theirs[key]), TOL_PYTHON)
            _record(name, f"{key} vs pin", rel_err(ours[key], ref), TOL_PIN)
            identical += np.array_equal(ours[key], theirs[key])
        assert np.array_equal(ours["crba"], ours["crba"].T)
    WORST[(name, "bit-identical to python %")] = 100.0 * identical / (len(states) * 5)


def test_batched_matches_python_kernels_and_pinocchio(case):
    name, model, oracle, fast_c, fast_py, states = case
    Q, V, A, TAU = (np.array(x) for x in zip(*states))
    ours, theirs = _calls(fast_c, Q, V, A, TAU), _calls(fast_py, Q, V, A, TAU)
    assert ours["crba"].shape == (N_STATES, model.nv, model.nv)
    for k, (q, v, a, tau) in enumerate(states):
        single = _calls(fast_c, q, v, a, tau)
        for key, ref in oracle.references(q, v, a, tau).items():
            assert np.array_equal(ours[key][k], single[key])  # the same C function per row
            _record(name, f"batched {key} vs python", rel_err(ours[key][k], theirs[key][k]),
                    TOL_PYTHON)
            _record(name, f"batched {key} vs pin", rel_err(ours[key][k], ref), TOL_PIN)
    # 1-D arguments broadcast against batched ones, as in the Python kernels
    v, a = states[0][1], states[0][2]
    _record(name, "broadcast rnea vs python",
            rel_err(fast_c.rnea(Q, v, a), fast_py.rnea(Q, v, a)), TOL_PYTHON)


def test_external_wrenches_and_keywords(case):
    name, model, _, fast_c, fast_py, states = case
    q, v, a, tau = states[0]
    links = [n for n, f in model.frames.items() if f.body >= 0][:2]
    f_ext = {link: np.linspace(-3.0, 4.0, 6) for link in links}
    assert np.array_equal(fast_c.rnea(q, v, a, f_ext), D.rnea(model, q, v, a, f_ext))
    assert np.array_equal(fast_c.aba(q=q, v=v, tau=tau, f_ext=f_ext),
                          fast_py.aba(q, v, tau, f_ext))
    assert np.array_equal(fast_c.rnea(q, v, a=a, f_ext={}), fast_py.rnea(q, v, a))
    assert np.array_equal(fast_c.gravity(q=list(q)), fast_py.gravity(q))


def test_source_is_c_and_inspectable(case):
    _, model, _, fast_c, _, _ = case
    for kernel in KERNELS:
        assert f"void rb_{kernel}(const double *const *in, double *out)" in fast_c.sources[kernel]
    assert "-ffast-math" not in str(kernel_cache._opt_flags(fast_c.ir["aba"]))
    assert fast_c.path.exists() and fast_c.path.suffix == ".so"


# ----------------------------------------------------------------------------- errors


def _raises_same(fast_c, fast_py, method: str, *args) -> str:
    messages = []
    for fast in (fast_c, fast_py):
        with pytest.raises(ValueError) as info:
            getattr(fast, method)(*args)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    return messages[0]


def test_bad_inputs_raise_the_python_kernels_errors(module_cache):
    model = load_model(kitchen_sink_urdf(with_floating=False), floating_base=True)
    fast_c, fast_py = make_dynamics(model, "c"), make_dynamics(model, "python")
    q, v, a, tau = random_state(model, np.random.default_rng(3))
    nan_a, inf_tau = a.copy(), tau.copy()
    nan_a[1], inf_tau[-1] = np.nan, -np.inf
    Q = np.tile(q, (4, 1))
    Q[2, 0] = np.inf
    expected = {
        ("rnea", "q must have length"): (q[:-1], v, a),
        ("rnea", "v must have length"): (q, np.append(v, 0.0), a),
        ("rnea", "a contains NaN or inf"): (q, v, nan_a),
        ("aba", "tau contains NaN or inf"): (q, v, inf_tau),
        ("gravity", "q contains NaN or inf"): (Q,),
        ("crba", "q must be an array of numbers"): ("not numbers",),
        ("crba", "q must have length"): (np.zeros((2, 3, model.nq)),),
        ("rnea", "v has 2 rows, expected 3"): (np.tile(q, (3, 1)), np.tile(v, (2, 1)), a),
        ("nonlinear_effects", "v contains NaN or inf"): (q, np.full(model.nv, np.nan)),
    }
    for (method, text), args in expected.items():
        assert text in _raises_same(fast_c, fast_py, method, *args)
    # a zero free-flyer quaternion: no rotation at all, refused instead of NaN (or 1/0)
    q0 = q.copy()
    q0[3:7] = 0.0
    for method, args in (("rnea", (q0, v, a)), ("aba", (q0, v, tau)),
                         ("aba", (np.array([q, q0]), v, tau))):
        assert "is undefined at this state" in _raises_same(fast_c, fast_py, method, *args)
    assert np.array_equal(fast_c.crba(q0), fast_py.crba(q0))  # M does not see the root's pose


def _massless_leaf_urdf(mimic: str = "") -> str:
    inertial = ('<inertial><origin xyz="0 0 0.1"/><mass value="1.0"/>'
                '<inertia ixx="0.01" iyy="0.02" izz="0.03" ixy="0" ixz="0" iyz="0"/></inertial>')

    def joint(name, parent, child, kind="revolute", extra=""):
        return (f'<joint name="{name}" type="{kind}"><parent link="{parent}"/>'
                f'<child link="{child}"/><origin xyz="0 0.05 0.2"/><axis xyz="0 1 0"/>'
                f'<limit lower="-2" upper="2" effort="5" velocity="3"/>{extra}</joint>')

    return ('<robot name="massless_leaf"><link name="base"/>'
            f'<link name="l1">{inertial}</link><link name="l2">{inertial}</link>'
            '<link name="tool"/><link name="tip"/>'  # no <inertial>: nothing for j3 to move
            + joint("j1", "base", "l1") + joint("j2", "l1", "l2")
            + joint("j3", "l2", "tool", extra=mimic) + joint("tip", "tool", "tip", "fixed")
            + "</robot>")


@pytest.mark.parametrize("kind", ["python", "c"])
@pytest.mark.parametrize("mimic", ["", '<mimic joint="j2" multiplier="1"/>'],
                         ids=["aba", "mimic_crba_ldlt"])
def test_massless_leaf_has_rnea_but_no_forward_dynamics(module_cache, kind, mimic):
    model = load_model(_massless_leaf_urdf(mimic))
    fast = make_dynamics(model, kind)  # generation succeeds
    q, v, a, tau = random_state(model, np.random.default_rng(8))
    assert rel_err(fast.rnea(q, v, a), D.rnea(model, q, v, a)) <= 1e-12
    assert rel_err(fast.gravity(q), D.gravity(model, q)) <= 1e-12
    assert rel_err(fast.crba(q), D.crba(model, q)) <= 1e-12
    if mimic:  # j3 follows j2, whose links have mass: forward dynamics is defined
        M, b = D.crba(model, q), D.nonlinear_effects(model, q, v)
        assert rel_err(fast.aba(q, v, tau), np.linalg.solve(M, tau - b)) <= 1e-9
        return
    message = model.forward_dynamics_problem()  # every backend says the same
    assert message.startswith("forward dynamics is undefined: joint 'j3' moves links "
                              "['tool', 'tip'] that carry no mass or inertia")
    for args in ((q, v, tau), (np.tile(q, (2, 1)), v, tau), (q, v, tau, {"l2": np.ones(6)})):
        for aba in (fast.aba, lambda *x: D.aba(model, *x)):
            with pytest.raises(ValueError) as info:
                aba(*args)
            assert str(info.value) == message


def test_kernel_choice_and_environment(module_cache, monkeypatch):
    model = load_model(kitchen_sink_urdf())
    assert make_dynamics(model).kind == "c"
    monkeypatch.setenv("RB_DYNAMICS_KERNELS", "python")
    assert make_dynamics(model).kind == "python"
    assert make_dynamics(model, kernels="c").kind == "c"  # an explicit choice wins
    live = LiveDynamics(model)  # nodes building in the background respect the choice too
    assert live.wait(60) and live.kind == "python", live.problem
    monkeypatch.setenv("RB_DYNAMICS_KERNELS", "fortran")
    with pytest.raises(ValueError, match="RB_DYNAMICS_KERNELS"):
        make_dynamics(model)
    with pytest.raises(ValueError, match="kernels must be one of"):
        make_dynamics(model, kernels="C++")


def test_batched_call_releases_the_gil(module_cache):
    rel, floating = REAL_ROBOTS["talos"]
    model = load_model(Path(robots_dir(), rel).read_text(), floating_base=floating)
    fast = make_dynamics(model, "c")
    rng = np.random.default_rng(1)
    Q = np.array([random_state(model, rng)[0] for _ in range(200)])
    Q = np.tile(Q, (200, 1))  # 40,000 states of ABA: many ticks of the probe thread long
    v, tau = np.zeros(model.nv), np.zeros(model.nv)
    start, stop, inside = ticks_during(lambda: fast.aba(Q, v, tau))
    # with the GIL held for the whole call the test's thread could not tick during it
    assert stop - start > 0.05 and len(inside) > 100
    assert np.diff(inside).max() < 0.5 * (stop - start)


# ----------------------------------------------------------------------------- build and cache

PROBE = r"""
import json, logging, sys
records = []
handler = logging.Handler()
handler.emit = lambda record: records.append(f"{record.levelname} {record.getMessage()}")
logging.getLogger("rb_dynamics.dynamics.kernel_cache").addHandler(handler)
logging.getLogger("rb_dynamics.dynamics.kernel_cache").setLevel(logging.DEBUG)
if "no-trampoline" in sys.argv:
    # as if the extension was never built
    sys.modules["rb_dynamics.dynamics.trampoline._ckernels"] = None
import numpy as np
from rb_dynamics.dynamics import KernelBuildError, make_dynamics
from rb_dynamics.model import load_model
model = load_model(sys.stdin.read())
fast = make_dynamics(model)
q = np.linspace(-1.0, 1.0, model.nq)
out = dict(kind=fast.kind, records=list(records), gravity=fast.gravity(q).tolist())
try:
    make_dynamics(model, kernels="c")
    out["forced"] = "c"
except KernelBuildError as exc:
    out["forced"] = str(exc)
print(json.dumps(out))
"""


def _probe(env_changes: dict[str, str | None], *flags: str, urdf: str | None = None) -> dict:
    """Run PROBE in a fresh interpreter with the environment changed; its JSON answer."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.pop("RB_DYNAMICS_KERNELS", None)
    for key, value in env_changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    proc = subprocess.run([sys.executable, "-c", PROBE, *flags], input=urdf or kitchen_sink_urdf(),
                          capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def _python_gravity(urdf: str | None = None) -> list[float]:
    model = load_model(urdf or kitchen_sink_urdf())
    q = np.linspace(-1.0, 1.0, model.nq)
    return make_dynamics(model, "python").gravity(q).tolist()


@pytest.fixture
def recording_cc(tmp_path) -> tuple[str, Path]:
    """A compiler wrapper that logs each call, then runs the system compiler."""
    log = tmp_path / "cc_calls.log"
    script = tmp_path / "recording-cc"
    script.write_text(f'#!/bin/sh\necho "$@" >> "{log}"\nexec "{COMPILER}" "$@"\n')
    script.chmod(0o755)
    return str(script), log


@pytest.mark.parametrize("env_changes, flags", [
    ({"PATH": "/nonexistent", "CC": None}, ()),
    ({"CC": "/nonexistent/bin/gcc"}, ()),
    ({}, ("no-trampoline",)),
], ids=["no_compiler_on_path", "missing_CC", "no_trampoline"])
def test_without_compiler_or_trampoline_falls_back_with_one_log_line(fresh_cache, env_changes,
                                                                     flags):
    out = _probe({"RB_DYNAMICS_CACHE": str(fresh_cache), **env_changes}, *flags)
    assert out["kind"] == "python"
    assert len(out["records"]) == 1 and out["records"][0].startswith("WARNING C kernels "
                                                                     "unavailable")
    assert out["gravity"] == _python_gravity()
    assert out["forced"].startswith("no C kernels for model 'kitchen_sink'")


def test_failed_compile_falls_back(fresh_cache, tmp_path):
    broken = tmp_path / "broken-cc"
    broken.write_text("#!/bin/sh\necho 'internal compiler error: simulated' >&2\nexit 4\n")
    broken.chmod(0o755)
    out = _probe({"RB_DYNAMICS_CACHE": str(fresh_cache), "CC": str(broken)})
    assert out["kind"] == "python" and len(out["records"]) == 1
    assert "exit 4" in out["records"][0] and "simulated" in out["records"][0]
    assert not list(fresh_cache.glob("*.so")) and not list(fresh_cache.glob(".build-*"))


def test_second_process_loads_from_cache_without_compiling(fresh_cache, recording_cc):
    cc, calls = recording_cc
    env = {"RB_DYNAMICS_CACHE": str(fresh_cache), "CC": cc}
    first = _probe(env)
    assert first["kind"] == "c"
    n_calls = len(calls.read_text().splitlines())
    assert n_calls >= 2  # compile units, then link
    assert any("compiled in" in r for r in first["records"])
    second = _probe(env)
    assert second["kind"] == "c"
    assert len(calls.read_text().splitlines()) == n_calls  # no compiler ran
    assert any("loaded from the cache" in r for r in second["records"])
    assert second["gravity"] == first["gravity"]
    np.testing.assert_allclose(second["gravity"], _python_gravity(), rtol=1e-12, atol=1e-12)
    assert len(list(fresh_cache.glob("*.so"))) == 1 and not list(fresh_cache.glob(".build-*"))


def test_corrupt_library_in_cache_is_rebuilt(fresh_cache, recording_cc):
    cc, calls = recording_cc
    env = {"RB_DYNAMICS_CACHE": str(fresh_cache), "CC": cc}
    assert _probe(env)["kind"] == "c"
    (library,) = fresh_cache.glob("*.so")
    library.write_bytes(b"\x7fELF truncated")
    n_calls = len(calls.read_text().splitlines())
    out = _probe(env)
    assert out["kind"] == "c" and any("compiled in" in r for r in out["records"])
    assert len(calls.read_text().splitlines()) > n_calls
    np.testing.assert_allclose(out["gravity"], _python_gravity(), rtol=1e-12, atol=1e-12)


def test_processes_starting_together_compile_once(fresh_cache, recording_cc):
    cc, calls = recording_cc
    env = dict(os.environ, RB_DYNAMICS_CACHE=str(fresh_cache), CC=cc,
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    procs = [subprocess.Popen([sys.executable, "-c", PROBE], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                              cwd=ROOT) for _ in range(3)]
    outs = [json.loads(p.communicate(kitchen_sink_urdf(), timeout=300)[0].splitlines()[-1])
            for p in procs]
    assert [o["kind"] for o in outs] == ["c"] * 3
    assert len({json.dumps(o["gravity"]) for o in outs}) == 1
    links = [line for line in calls.read_text().splitlines() if "-shared" in line]
    assert len(links) == 1  # the lock made the others wait and load the library
    assert len(list(fresh_cache.glob("*.so"))) == 1


def test_unwritable_cache_falls_back_to_python(tmp_path):
    """A cache directory that cannot be created (here: below a regular file, which holds even
    for root) gives the Python kernels, one log line, no exception."""
    blocker = tmp_path / "not_a_directory"
    blocker.write_text("")
    out = _probe({"RB_DYNAMICS_CACHE": str(blocker / "kernels")})
    assert out["kind"] == "python" and len(out["records"]) == 1
    assert "cache directory" in out["records"][0]
    assert out["gravity"] == _python_gravity()


def test_background_build_then_cached(fresh_cache, recording_cc, monkeypatch):
    cc, calls = recording_cc
    monkeypatch.setenv("CC", cc)
    model = load_model(_massless_leaf_urdf())
    live = LiveDynamics(model, "c")
    assert live.wait(120) and live.kind == "c" and live.kernels is not None, live.problem
    n_calls = len(calls.read_text().splitlines())
    assert n_calls >= 2  # compile units, then link
    again = make_dynamics(model, "c")  # a cache hit: no compiler runs
    assert again.kind == "c" and len(calls.read_text().splitlines()) == n_calls
    q = np.linspace(-0.5, 0.5, model.nq)
    assert np.array_equal(again.crba(q), make_dynamics(model, "python").crba(q))
    assert np.array_equal(live.crba(q), again.crba(q))


def test_background_build_reports_why_not(fresh_cache, monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    live = LiveDynamics(load_model(kitchen_sink_urdf()), "c")
    assert live.wait(60) and live.kind == "reference" and "not found" in live.problem
    with pytest.raises(KernelBuildError, match="not found"):
        make_dynamics(load_model(kitchen_sink_urdf()), kernels="c")
