# SPDX-License-Identifier: Apache-2.0
"""From a recording of a periodic excitation to the data a fit takes.

1. ``align``: where the excitation starts in the recording (the recorded motion correlated
   with the plan's over its first period: the plan says where the periods are, the recording
   what the arm did), and how many whole periods follow;
2. ``periodic_data``: each period resampled on one grid of phases; the periods split into
   those fitted and those held out for validation; the fitted ones averaged phase by phase
   after dropping outliers (further than ``OUTLIER_SIGMAS`` noise σ from the median of the
   periods, σ robust and local in phase), the noise σ per joint estimated from their
   spread; positions fitted by a Fourier series, whose derivatives give velocities and
   accelerations;
3. ``execution``: how the recorded motion executed the plan, per joint (range and peak speed
   covered, tracking error): a joint that moved much less than planned was not excited, and
   its parameters cannot be known from the recording;
4. ``low_pass``: the ideal low-pass of periodic data (its Fourier series cut at a frequency:
   zero phase, no edges), applied alike to efforts and regressor columns, so it removes noise
   and biases nothing; the same cut moves the efforts by the delay (a phase shift).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .fourier import FourierTrajectory, fit_fourier
from .measurements import JointRecording, RecordingError

__all__ = [
    "LOCAL_WINDOW",
    "MAX_HOLE_SAMPLES",
    "MIN_COVERAGE",
    "MIN_RESEMBLANCE",
    "OUTLIER_SIGMAS",
    "Execution",
    "LocalMotion",
    "PeriodicData",
    "align",
    "execution",
    "low_pass",
    "local_motion",
    "periodic_data",
]

OUTLIER_SIGMAS = 5.0
LOCAL_WINDOW = 0.05  # s: the Savitzky–Golay window of the held-out periods' derivatives
SCALE_WINDOW = 0.2  # s of phases over which the noise scale of the outlier test is averaged
MIN_FIT_PERIODS = 2  # the noise comes from their spread
# the least mean correlation of the recorded motion with the plan's over a period for the
# recording to hold the excitation (an arm at rest, or doing something else, scores near 0; an
# arm that over- or undershoots every joint's range still near 1)
MIN_RESEMBLANCE = 0.5
# states lost in a row inside the excitation that interpolation may bridge (a late sample, a
# jittery clock); a longer hole is data that was never recorded
MAX_HOLE_SAMPLES = 5
# the least share of its planned range and of its planned peak speed a joint must cover: the
# information on its armature and friction grows with the square of its accelerations and
# speeds, so at half the plan it has a quarter of what the plan was chosen for; a controller
# that follows a feasible plan covers over 90 %, one too soft for the joint far less (a light
# wrist without armature under computed torque: 17–56 %), and then the efforts hold more of
# what the model does not write than of what it does
MIN_COVERAGE = 0.5


@dataclass(frozen=True, eq=False)
class LocalMotion:
    """Positions, velocities and accelerations on a uniform grid ``t`` (s), derived locally
    (Savitzky–Golay: a cubic over ``LOCAL_WINDOW`` s) from the recorded positions; ``evaluate``
    interpolates them, as ``FourierTrajectory.evaluate`` does for periodic motion."""

    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray

    def evaluate(self, t) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        t = np.asarray(t, dtype=float)
        return tuple(np.column_stack([np.interp(t, self.t, x[:, j]) for j in range(x.shape[1])])
                     for x in (self.q, self.qd, self.qdd))


def local_motion(recording: JointRecording, t0: float, t1: float) -> LocalMotion:
    """``LocalMotion`` from ``t0`` to ``t1`` (s after the first stamp), times from ``t0``."""
    import scipy.signal  # here, not above: the nodes start without it

    rate = recording.rate
    window = 2 * int(LOCAL_WINDOW * rate / 2) + 1
    margin = window / rate
    t = np.arange(t0 - margin, t1 + margin, 1.0 / rate)
    q = _resample(recording, t, recording.position)[0]
    derive = [scipy.signal.savgol_filter(q, window, 3, deriv=d, delta=1.0 / rate, axis=0)
              for d in (0, 1, 2)]
    return LocalMotion(t - t0, *derive)


@dataclass(frozen=True, eq=False)
class PeriodicData:
    """One period of the excitation, seen through the recording.

    ``phase`` (M,) s from the period's start; ``q``, ``qd``, ``qdd`` (M, n) the averaged
    motion (Fourier fit: analytic derivatives); ``effort`` (M, n) averaged; ``noise`` (n,)
    σ of one recorded sample's effort; ``periods`` fitted; ``held_out``: per held-out period,
    its recorded samples (phase (N_k,) s, efforts (N_k, n)) and its own motion
    (``LocalMotion``: nothing assumed periodic there); ``outliers``: samples dropped from the
    average.
    """

    phase: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    effort: np.ndarray
    noise: np.ndarray
    periods: int
    held_out: list[tuple[np.ndarray, np.ndarray, LocalMotion]]
    outliers: int
    start: float  # s after the recording's first stamp

    @property
    def period(self) -> float:
        return float(self.phase[1] - self.phase[0]) * len(self.phase)

    @property
    def rate(self) -> float:
        return len(self.phase) / self.period


def align(recording: JointRecording, plan: FourierTrajectory) -> tuple[float, int]:
    """(start, periods): the time (s after the first stamp) where the recording's positions
    move most like the plan's first period, and how many whole periods fit after it.

    The plan tells where the periods are, not what the arm must have done: the match is the
    correlation of each joint's recorded motion with its planned one (averaged over the joints
    the plan moves), blind to offsets and to ranges under- or overshot — an arm whose model
    misses its armature repeats the excitation with the wrong amplitude, and what it recorded
    is what the fit fits (``execution`` says how far it was from the plan). A
    ``RecordingError`` when the recording holds no whole period, or no motion that resembles
    the plan (correlation under ``MIN_RESEMBLANCE``: the plan was not executed)."""
    T = plan.period
    if recording.duration < T:
        raise RecordingError(f"{recording.source}: too short: {recording.duration:.2f} s "
                             f"holds no whole period of the excitation ({T:g} s)")
    probe = np.arange(0.0, T, 0.02)
    q_plan = plan.evaluate(probe)[0]
    spread = np.ptp(q_plan, axis=0)
    if not spread.max() > 1e-9:
        raise RecordingError(f"{recording.source}: the plan moves no joint (every Fourier "
                             "coefficient zero): there is no excitation to find")
    moved = spread >= 1e-2 * spread.max()  # the joints the plan moves
    shape = q_plan[:, moved] - q_plan[:, moved].mean(axis=0)
    shape /= np.linalg.norm(shape, axis=0)  # zero mean, unit norm: Σ w·shape is w's projection

    def unlikeness(windows: np.ndarray) -> np.ndarray:
        """1 − the mean correlation with the plan of each window (…, joints, len(probe))."""
        centred = windows - windows.mean(axis=-1, keepdims=True)
        norm = np.linalg.norm(centred, axis=-1)
        projection = np.einsum("...jl,lj->...j", centred, shape)
        correlation = np.where(norm > 1e-12, projection / np.maximum(norm, 1e-12), 0.0)
        return 1.0 - correlation.mean(axis=-1)

    def at(starts: np.ndarray) -> np.ndarray:
        q = [_resample(recording, s + probe, recording.position)[0][:, moved] for s in starts]
        return unlikeness(np.swapaxes(np.stack(q), 1, 2))

    # every start on a 20 ms grid at once (sliding windows), then to the sample near the best
    grid = _resample(recording, np.arange(0.0, recording.duration, 0.02),
                     recording.position)[0][:, moved]
    costs = unlikeness(np.lib.stride_tricks.sliding_window_view(grid, len(probe), axis=0))
    # the excitation repeats: the first start that matches as well as the best one (a lead-in
    # or the first period's transient matches worse)
    first = int(np.argmax(costs <= costs.min() + max(0.1 * costs.min(), 1e-4)))
    near = slice(max(first - 5, 0), first + 6)
    k = near.start + int(np.argmin(costs[near]))
    best, cost = 0.02 * k, float(costs[k])
    fine = np.arange(max(best - 0.03, 0.0), min(best + 0.03, recording.duration - T) + 1e-12,
                     1.0 / max(recording.rate, 1.0))
    if len(fine):
        fine_costs = at(fine)
        k = int(np.argmin(fine_costs))
        best, cost = float(fine[k]), float(fine_costs[k])
    resemblance = 1.0 - cost
    if resemblance < MIN_RESEMBLANCE:
        raise RecordingError(
            f"{recording.source}: the recorded motion does not follow the planned excitation "
            f"(its best match, at {best:.2f} s, correlates {resemblance:.2f} with the plan; "
            f"at least {MIN_RESEMBLANCE:g} needed); was the plan executed while recording?")
    periods = int(np.floor((recording.duration - best) / T + 1e-9))
    return best, periods


def _resample(recording: JointRecording, times: np.ndarray, values: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """``values`` linearly interpolated at ``times`` (s after the first stamp), and the factor
    w² + (1 − w)² by which each interpolation scales the variance of white noise."""
    t = recording.stamps - recording.stamps[0]
    k = np.clip(np.searchsorted(t, times) - 1, 0, len(t) - 2)
    w = np.clip((times - t[k]) / (t[k + 1] - t[k]), 0.0, 1.0)[:, None]
    return (1.0 - w) * values[k] + w * values[k + 1], (w ** 2 + (1.0 - w) ** 2)[:, 0]


def periodic_data(recording: JointRecording, period: float, start: float, periods: int, *,
                  held_out: int = 1, bandwidth: float = 10.0, settle: int = 1) -> PeriodicData:
    """The averaged period of ``periods`` whole periods from ``start`` (s after the first
    stamp), the last ``held_out`` kept apart for validation; positions fitted with the
    harmonics up to ``bandwidth`` Hz (at least 20), the band the fit's efforts keep. The first
    ``settle`` periods are skipped when there are enough (an arm under feedback enters the
    periodic motion with a transient). A ``RecordingError`` with fewer than
    ``MIN_FIT_PERIODS`` + ``held_out`` periods."""
    if periods < MIN_FIT_PERIODS + held_out:
        raise RecordingError(
            f"{recording.source}: too short: {periods} whole period(s) of {period:g} s of the "
            f"excitation; a fit needs at least {MIN_FIT_PERIODS + held_out} "
            f"({MIN_FIT_PERIODS} to average and estimate the noise, {held_out} to validate)")
    skip = settle if periods >= MIN_FIT_PERIODS + held_out + settle else 0
    start, periods = start + skip * period, periods - skip
    _check_holes(recording, start, start + periods * period)
    M = int(round(period * recording.rate))
    harmonics = max(20, int(np.ceil(bandwidth * period)))
    phase = np.arange(M) * (period / M)
    segments_q = np.stack([_resample(recording, start + k * period + phase,
                                     recording.position)[0] for k in range(periods)])
    resampled = [_resample(recording, start + k * period + phase, recording.effort)
                 for k in range(periods)]
    segments_e = np.stack([r[0] for r in resampled])
    variance_factor = float(np.mean([r[1] for r in resampled[:periods - held_out]]))
    fit_q, fit_e = segments_q[:periods - held_out], segments_e[:periods - held_out]
    median = np.median(fit_e, axis=0)
    deviation = fit_e - median
    keep = np.abs(deviation) <= OUTLIER_SIGMAS * _local_scale(deviation, recording.rate)
    count = keep.sum(axis=0)
    effort = np.where(count > 0, (fit_e * keep).sum(axis=0) / np.maximum(count, 1), median)
    residual = np.where(keep, fit_e - effort, 0.0)
    dof = np.maximum(count - 1, 0).sum(axis=0)
    # σ of one recorded sample: the spread of the interpolated values, scaled back
    noise = np.sqrt((residual ** 2).sum(axis=(0, 1)) / np.maximum(dof, 1) / variance_factor)
    motion = fit_fourier(phase, fit_q.mean(axis=0), period, harmonics).evaluate(phase)
    t = recording.stamps - recording.stamps[0]
    held = []
    for k in range(periods - held_out, periods):
        inside = (t >= start + k * period) & (t < start + (k + 1) * period)
        held.append((t[inside] - start - k * period, recording.effort[inside],
                     local_motion(recording, start + k * period, start + (k + 1) * period)))
    return PeriodicData(phase, *motion, effort, noise, periods - held_out, held,
                        int((~keep).sum()), start)


@dataclass(frozen=True, eq=False)
class Execution:
    """How the recording executed the plan, per joint (n,): ``range`` the recorded range
    (max − min of q over the averaged fitted period) over the planned one, ``speed`` the
    recorded peak |q̇| over the planned one, ``tracking`` the RMS of recorded minus planned q
    (rad or m) at the same phases of the aligned period."""

    range: np.ndarray
    speed: np.ndarray
    tracking: np.ndarray

    def short(self) -> np.ndarray:
        """The joints that covered less than ``MIN_COVERAGE`` of their planned range or speed."""
        return np.flatnonzero(~((self.range >= MIN_COVERAGE) & (self.speed >= MIN_COVERAGE)))


def execution(data: PeriodicData, plan: FourierTrajectory) -> Execution:
    """The ``Execution`` of ``plan`` seen in ``data`` (whose phase 0 is the plan's, as
    ``align`` found it)."""
    q, qd, _ = plan.evaluate(data.phase)
    tiny = 1e-12
    return Execution(np.ptp(data.q, axis=0) / np.maximum(np.ptp(q, axis=0), tiny),
                     np.abs(data.qd).max(axis=0) / np.maximum(np.abs(qd).max(axis=0), tiny),
                     np.sqrt(np.mean((data.q - q) ** 2, axis=0)))


def _check_holes(recording: JointRecording, start: float, end: float) -> None:
    """A ``RecordingError`` naming the longest hole in the stamps between ``start`` and ``end``
    (s after the first stamp) longer than ``MAX_HOLE_SAMPLES`` sample periods."""
    t = recording.stamps - recording.stamps[0]
    inside = t[max(int(np.searchsorted(t, start)) - 1, 0):int(np.searchsorted(t, end)) + 1]
    steps = np.diff(inside)
    sample = 1.0 / recording.rate
    holes = np.flatnonzero(steps > MAX_HOLE_SAMPLES * sample)
    if len(holes):
        k = holes[int(np.argmax(steps[holes]))]
        raise RecordingError(
            f"{recording.source}: {len(holes)} hole(s) in the recorded excitation "
            f"({start:.3f}–{end:.3f} s); the longest, {steps[k]:.3f} s (about "
            f"{round(steps[k] / sample) - 1} states at {recording.rate:.0f} Hz), after "
            f"t = {inside[k]:.3f} s: states were lost while recording (more than "
            f"{MAX_HOLE_SAMPLES} in a row are not interpolated); record again")


def _local_scale(deviation: np.ndarray, rate: float) -> np.ndarray:
    """The noise σ of each phase (M, n), from the periods' deviations from their median
    (P, M, n): a robust σ per joint caps each squared deviation at 3 of it (outliers weigh no
    more than that), and the capped squares are averaged over the periods and ``SCALE_WINDOW``
    s of phases (noise that grows with the effort: a scale of its own at each phase)."""
    import scipy.ndimage

    P = len(deviation)
    robust = 1.4826 * np.median(np.abs(deviation), axis=(0, 1))
    capped = np.minimum(deviation ** 2, (3.0 * robust) ** 2).mean(axis=0) * P / max(P - 1, 1)
    size = min(2 * int(SCALE_WINDOW * rate / 2) + 1, len(capped))
    local = scipy.ndimage.uniform_filter1d(capped, size, axis=0, mode="wrap")
    return np.maximum(np.sqrt(local), 1e-12)


def low_pass(x: np.ndarray, cutoff: float, rate: float, every: int = 1,
             delay: float = 0.0) -> np.ndarray:
    """``x`` (M, …), one period sampled at ``rate`` Hz, with every frequency above ``cutoff``
    Hz removed (the periodic ideal low-pass: zero phase, no edges), moved ``delay`` s earlier
    (x(t + delay)), and sampled every ``every``-th sample."""
    M = x.shape[0]
    f = np.fft.rfftfreq(M, 1.0 / rate)
    gain = (f <= cutoff).astype(complex)
    if delay:
        gain = gain * np.exp(2j * np.pi * f * delay)
    spectrum = np.fft.rfft(x, axis=0) * gain.reshape((-1,) + (1,) * (x.ndim - 1))
    return np.fft.irfft(spectrum, n=M, axis=0)[::every]
