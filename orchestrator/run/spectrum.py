"""Welch's power spectral density in numpy alone, the floats of `scipy.signal.welch`.

The summary takes one spectrum per run (the decode occupancy's dominant period); importing
`scipy.signal` for it costs ~0.45 s of CPU per process, more than the summary itself. This
computes what `scipy.signal.welch(x, fs=fs, nperseg=nperseg)` computes with its defaults
(Welch, "The use of fast Fourier transform for the estimation of power spectra", IEEE
Trans. Audio Electroacoust. 15(2), 1967): a periodic Hann window scaled to unit power
density, segments overlapping by half, each segment's mean removed, one-sided density
(every bin but the first and, for an even length, the last counted twice), the mean over
the segments. The operations are those of SciPy 1.17's `ShortTimeFFT` path in the same
order on arrays of the same layout, so the floats are the same to the last bit;
`tests/property/test_spectrum.py` compares both for exact equality.
"""

from __future__ import annotations

import numpy as np


def hann_periodic(n: int) -> np.ndarray:
    """The periodic (DFT-even) Hann window of `n` samples: the symmetric window of n + 1
    samples without its last one."""
    if n <= 1:
        return np.ones(n)
    phase = np.linspace(-np.pi, np.pi, n + 1)
    w = np.zeros(n + 1)
    for k, a in enumerate((0.5, 0.5)):
        w += a * np.cos(k * phase)
    return w[:-1]


def welch(x: np.ndarray, fs: float, nperseg: int) -> tuple[np.ndarray, np.ndarray]:
    """(frequencies in Hz, power spectral density per Hz) of the real signal `x` sampled at
    `fs` Hz, over segments of `nperseg` samples (1 <= nperseg <= len(x))."""
    x = np.asarray(x, dtype=float)
    if not 1 <= nperseg <= len(x):
        raise ValueError(f"welch: nperseg must be in [1, {len(x)}], got {nperseg}")
    overlap = nperseg // 2
    hop = nperseg - overlap
    win = hann_periodic(nperseg)
    period_s = 1 / fs
    # Unit power density: a Python sum, element by element, as SciPy takes it.
    win = win * (1 / np.sqrt(sum(win**2) / period_s))
    segments = (len(x) - overlap) // hop
    spectra = np.zeros((nperseg // 2 + 1, segments), dtype=complex)
    for p in range(segments):
        seg = x[p * hop:p * hop + nperseg]
        spectra[:, p] = np.fft.rfft((seg - np.mean(seg, -1, keepdims=True)) * win, n=nperseg)
    power = spectra.real**2 + spectra.imag**2
    power[1:-1 if nperseg % 2 == 0 else None] *= 2
    power = power.mean(axis=-1) if segments > 1 else power[:, 0]
    return np.fft.rfftfreq(nperseg, period_s), power
