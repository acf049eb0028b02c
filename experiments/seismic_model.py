"""The seismic inversion model (Bonilla et al. 2019, §9.8) shared by ``seismic.py`` (SAVIGP) and
``seismic_reference.py`` (its exact posterior by HMC), and the data and comparison they share.

113 sensor sites along a line; at each, the two-way reflection times of P = 4 interfaces. Q = 8
latent GPs over the sensor location x: 4 layer depths and 4 propagation velocities (in
:data:`LATENT_NAMES` order), linked to the times by the forward model of ``likelihoods.Seismic``
(eq. 43) with observation noise standard deviations :data:`NOISE_STD`. Priors: means
:data:`PRIOR_DEPTH` (m) and :data:`PRIOR_VELOCITY` (m/s), standard deviations 15 % (depths) and
10 % (velocities) of those means (:func:`prior`). SAVIGP models depths and velocities divided by
:data:`SCALE`, as the original code did.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

PRIOR_DEPTH = (200.0, 500.0, 1600.0, 2200.0)
PRIOR_VELOCITY = (1950.0, 2300.0, 2750.0, 3650.0)
DEPTH_REL_STD, VELOCITY_REL_STD = 0.15, 0.10
NOISE_STD = (0.025, 0.05, 0.075, 0.1)
SCALE = 10.0  # the original code's division of depths and velocities
LATENT_NAMES = ["depth_1", "depth_2", "depth_3", "depth_4", "vel_1", "vel_2", "vel_3", "vel_4"]


def load(data: Path):
    """Times Y (113, 4), locations x (113, 1) in metres, MCMC means and stds (113, 8) each."""
    d = np.loadtxt(data / "seismic" / "data.csv", delimiter=",")
    ref = np.genfromtxt(data / "seismic" / "mcmc_reference.csv", delimiter=",", names=True)
    names = ref.dtype.names
    mcmc_mean = np.stack([ref[n] for n in names[:8]], 1)
    mcmc_std = np.stack([ref[n] for n in names[8:16]], 1)
    return d[:, :4], d[:, 4:5], mcmc_mean, mcmc_std


def prior():
    """Prior means and standard deviations of the 8 latent functions in physical units, ``(8,)`` each."""
    mean = np.array(PRIOR_DEPTH + PRIOR_VELOCITY)
    std = np.r_[DEPTH_REL_STD * mean[:4], VELOCITY_REL_STD * mean[4:]]
    return mean, std


def agreement(mean, std, ref_mean, ref_std) -> tuple[np.ndarray, np.ndarray]:
    """Per latent function, over the N sites of ``(N, Q)`` arrays: the mean error
    mean_n |mean - ref_mean| / ref_std and the std ratio median_n std / ref_std, each ``(Q,)``."""
    return (np.abs(mean - ref_mean) / ref_std).mean(0), np.median(std / ref_std, 0)
