"""DistriFusion's idea, measured exactly: patch-parallel diffusion sampling with stale remote activations.

DistriFusion (Li et al., CVPR 2024) splits one image into patches across GPUs. Each GPU denoises its own
patch with fresh values, but for the interaction with the other patches it uses their values from the
*previous* denoising step, which arrived while it was computing: communication hides behind compute, and
since the state changes little from one step to the next the result barely changes.

To measure "barely" without a trained network, the data here are Gaussian: an "image" x0 ~ N(0, Σ) with a
smooth covariance Σ (nearby pixels correlated). For such data the best noise predictor is known in closed
form: with x_t = √ᾱ_t x0 + √(1 - ᾱ_t) ε, the noisy data are N(0, C_t), C_t = ᾱ_t Σ + (1 - ᾱ_t) I, and
ε̂(x_t) = √(1 - ᾱ_t) C_t⁻¹ x_t. The predictor couples every pixel with every other, as attention does.
So the DDIM sampler below (Song et al. 2021, deterministic) is exact, and the only error in the patch-parallel
run is the staleness itself.
"""

from __future__ import annotations

import numpy as np

from mlsys_lab.validation import check_array, check_finite, check_int, check_number, check_positive


def smooth_covariance(n_pixels: int, length_scale: float = 4.0, jitter: float = 1e-3) -> np.ndarray:
    """Σ_ij = exp(-(i - j)² / 2ℓ²) + jitter·δ_ij: a 1-D "image" whose nearby pixels are correlated."""
    check_int("n_pixels", n_pixels, low=2, high=4096)  # an (n, n) matrix
    check_positive("length_scale", length_scale)
    check_finite("jitter", jitter, low=0.0)
    i = np.arange(n_pixels)
    return np.exp(-((i[:, None] - i[None, :]) ** 2) / (2 * length_scale**2)) + jitter * np.eye(n_pixels)


def alpha_bar_schedule(n_steps: int, beta_min: float = 1e-4, beta_max: float = 0.02, n_train: int = 1000) -> np.ndarray:
    """ᾱ at ``n_steps`` evenly spaced timesteps of DDPM's linear β schedule (1000 training steps),
    from the noisiest (t = 999) down to the cleanest (t = 0)."""
    n_train = check_int("n_train", n_train, low=1, high=10**6)
    check_int("n_steps", n_steps, low=1, high=n_train)
    check_number("beta_min", beta_min, low=0.0, high=1.0, high_inclusive=False)
    check_number("beta_max", beta_max, low=0.0, high=1.0, high_inclusive=False)
    if beta_max < beta_min:
        raise ValueError(f"beta_max must be >= beta_min={beta_min:g} (noise grows along the schedule); "
                         f"got {beta_max:g}")
    alpha_bar = np.cumprod(1.0 - np.linspace(beta_min, beta_max, n_train))
    timesteps = np.linspace(n_train - 1, 0, n_steps).round().astype(int)
    return alpha_bar[timesteps]


def _eps_operators(sigma: np.ndarray, alpha_bars: np.ndarray) -> list[np.ndarray]:
    eye = np.eye(len(sigma))
    return [np.sqrt(1 - a) * np.linalg.inv(a * sigma + (1 - a) * eye) for a in alpha_bars]


def ddim_sample(x_noise: np.ndarray, sigma: np.ndarray, n_steps: int, n_patches: int = 1) -> np.ndarray:
    """Deterministic DDIM from ``x_noise`` (pixels × samples) to clean samples, with the exact ε-predictor.

    ``n_patches`` > 1 runs it patch-parallel as DistriFusion does: pixels split into contiguous patches; at
    every step after the first, each patch computes its ε̂ from its own fresh values and the *previous*
    step's values of the other patches. The first step is synchronous (DistriFusion's warm-up step).
    """
    n_pixels = check_array("sigma", sigma, ndim=2, kinds="f", finite=True).shape[0]
    if sigma.shape != (n_pixels, n_pixels):
        raise ValueError(f"sigma must be a square (n_pixels, n_pixels) covariance; got shape {sigma.shape}")
    if check_array("x_noise", x_noise, ndim=(1, 2), finite=True).shape[0] != n_pixels:
        raise ValueError(f"x_noise must have one row per pixel of sigma ({n_pixels}); got shape {x_noise.shape}")
    check_int("n_patches", n_patches, low=1, high=n_pixels)
    alpha_bars = alpha_bar_schedule(n_steps)
    operators = _eps_operators(sigma, alpha_bars)
    bounds = np.linspace(0, n_pixels, n_patches + 1).round().astype(int)
    x = np.array(x_noise, dtype=np.float64)
    x_previous = x.copy()
    for step, (a, op) in enumerate(zip(alpha_bars, operators, strict=True)):
        if step == 0 or n_patches == 1:
            eps = op @ x
        else:
            eps = np.empty_like(x)
            for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
                mixed = x_previous.copy()          # other patches: what arrived from the previous step
                mixed[lo:hi] = x[lo:hi]            # own patch: fresh
                eps[lo:hi] = op[lo:hi] @ mixed
        x0_hat = (x - np.sqrt(1 - a) * eps) / np.sqrt(a)
        a_next = alpha_bars[step + 1] if step + 1 < len(alpha_bars) else 1.0
        x_previous = x
        x = np.sqrt(a_next) * x0_hat + np.sqrt(1 - a_next) * eps
    return x


def staleness_error(n_pixels: int = 64, n_steps: int = 50, n_patches: int = 4, n_samples: int = 256,
                    seed: int = 0) -> float:
    """Relative difference between patch-parallel and synchronous samples from the same noise:
    ‖x_parallel − x_sync‖ / ‖x_sync‖ over ``n_samples`` images."""
    sigma = smooth_covariance(n_pixels)
    check_int("n_steps", n_steps, low=1, high=1000)
    check_int("n_patches", n_patches, low=1, high=n_pixels)
    check_int("n_samples", n_samples, low=1, high=2**16)
    noise = np.random.default_rng(check_int("seed", seed, low=0)).standard_normal((n_pixels, n_samples))
    sync = ddim_sample(noise, sigma, n_steps)
    parallel = ddim_sample(noise, sigma, n_steps, n_patches)
    return float(np.linalg.norm(parallel - sync) / np.linalg.norm(sync))
