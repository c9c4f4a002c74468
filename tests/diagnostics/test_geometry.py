"""Geometry diagnostics against closed forms, mpmath and direct formulas."""

from __future__ import annotations

import math
import warnings

import mpmath as mp
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.spatial.distance import pdist
from scipy.special import betainc

from imsearch_align.diagnostics.geometry import (
    NormalizationWarning,
    alignment,
    diagnose,
    linear_separability,
    log_cap_area,
    log_sphere_area,
    modality_gap,
    modality_separability,
    spherical_knn_entropy,
    uniformity,
)


def _sphere(n: int, d: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


# ----------------------------------------------------------------- log cap area


def _mp_log_cap(theta: float, d: int) -> float:
    """Oracle: log of |S^(d-2)| * integral_0^theta sin^(d-2), via mpmath's betainc."""
    with mp.workdps(60):
        a, th = mp.mpf(d - 1) / 2, mp.mpf(theta)
        log_s = mp.log(2) + mp.mpf(d) / 2 * mp.log(mp.pi) - mp.loggamma(mp.mpf(d) / 2)
        ref = th if th <= mp.pi / 2 else mp.pi - th
        half = mp.betainc(a, mp.mpf(1) / 2, 0, mp.sin(ref) ** 2, regularized=True) / 2
        return float(log_s + mp.log(half if th <= mp.pi / 2 else 1 - half))


@pytest.mark.parametrize("d", [2, 3, 16, 512, 768, 1024])
def test_log_cap_area_matches_mpmath(d):
    thetas = np.array([1e-3, 0.01, 0.1, 0.235, 0.5, 1.0, 1.5, math.pi / 2, 1.6, 2.0, 3.0, 3.14])
    got = log_cap_area(thetas, d)
    want = np.array([_mp_log_cap(t, d) for t in thetas])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_log_cap_area_finite_where_naive_betainc_underflows():
    d, theta = 512, 0.1
    with np.errstate(divide="ignore"):
        naive = np.log(betainc((d - 1) / 2, 0.5, np.sin(theta) ** 2))
    assert naive == -np.inf
    assert abs(log_cap_area(theta, d) - _mp_log_cap(theta, d)) < 1e-6


def test_log_cap_area_quadrature_and_ends():
    # d = 3: A(theta) = 2 pi (1 - cos theta) (the textbook spherical cap).
    th = np.linspace(0.01, math.pi - 0.01, 9)
    np.testing.assert_allclose(
        log_cap_area(th, 3), np.log(2 * np.pi * (1 - np.cos(th))), rtol=1e-12
    )
    # d = 2: the arc of half-angle theta has length 2 theta.
    np.testing.assert_allclose(log_cap_area(th, 2), np.log(2 * th), rtol=1e-12)
    assert log_cap_area(0.0, 512) == -np.inf
    assert log_cap_area(math.pi, 512) == pytest.approx(log_sphere_area(512), abs=1e-12)
    assert log_sphere_area(512) == pytest.approx(-867.968, abs=1e-3)


@pytest.mark.parametrize("bad", [-0.1, 3.2, float("nan")])
def test_log_cap_area_rejects_angles_outside_0_pi(bad):
    with pytest.raises(ValueError, match="theta must be in"):
        log_cap_area([0.5, bad], 8)


# ----------------------------------------------------------------- entropy


def test_entropy_of_uniform_sample_is_log_sphere_area():
    d = 512
    res = spherical_knn_entropy(_sphere(2000, d, 0), k=5)
    assert res.log_sphere_area == pytest.approx(log_sphere_area(d))
    assert abs(res.entropy - log_sphere_area(d)) < 0.05
    assert res.n == 2000 and res.d == d and res.n_duplicates == 0


def test_entropy_matches_brute_force_formula():
    from scipy.special import digamma

    u = _sphere(300, 8, 1)
    k = 3
    chord = np.sqrt(((u[:, None, :] - u[None, :, :]) ** 2).sum(-1))
    np.fill_diagonal(chord, np.inf)
    theta = 2 * np.arcsin(np.sort(chord, axis=1)[:, k - 1] / 2)
    want = digamma(300) - digamma(k) + np.mean([_mp_log_cap(t, 8) for t in theta])
    got = spherical_knn_entropy(u.astype(np.float32), k=k, chunk_size=37)
    assert got.entropy == pytest.approx(want, abs=1e-5)


def test_entropy_removes_duplicates():
    u = _sphere(200, 6, 2)
    res = spherical_knn_entropy(np.vstack([u, u[:10]]), k=2)
    assert res.n_duplicates == 10 and res.n == 200
    assert res.entropy == pytest.approx(spherical_knn_entropy(u, k=2).entropy)


def test_entropy_needs_k_plus_one_points():
    with pytest.raises(ValueError, match="at least k \\+ 1 = 6 points"):
        spherical_knn_entropy(_sphere(5, 4, 0), k=5)


# ----------------------------------------------------------------- uniformity / alignment


def _mp_uniformity(d: int, t: float) -> float:
    """Closed form for the uniform law: -2t + log[Gamma(d/2) t^(1-d/2) I_(d/2-1)(2t)]."""
    with mp.workdps(40):
        nu = mp.mpf(d) / 2 - 1
        return float(
            -2 * t
            + mp.loggamma(mp.mpf(d) / 2)
            + (1 - mp.mpf(d) / 2) * mp.log(t)
            + mp.log(mp.besseli(nu, 2 * t))
        )


def test_uniformity_closed_form_values():
    assert _mp_uniformity(512, 2.0) == pytest.approx(-3.9844, abs=1e-4)
    assert _mp_uniformity(3, 2.0) == pytest.approx(-2.0798, abs=1e-4)


def test_uniform_sample_uniformity_near_closed_form():
    got = uniformity(_sphere(3000, 512, 3).astype(np.float32))
    assert got == pytest.approx(_mp_uniformity(512, 2.0), abs=3e-3)


def test_uniformity_equals_direct_pdist_and_is_chunk_invariant():
    u = _sphere(257, 16, 4)
    want = math.log(np.mean(np.exp(-2.0 * pdist(u, "sqeuclidean"))))
    assert uniformity(u) == pytest.approx(want, abs=1e-12)
    assert uniformity(u, chunk_size=10) == pytest.approx(want, abs=1e-12)
    assert uniformity(u, t=7.5, chunk_size=3) == pytest.approx(
        math.log(np.mean(np.exp(-7.5 * pdist(u, "sqeuclidean")))), abs=1e-12
    )
    assert uniformity(sp.csr_matrix(u), chunk_size=50) == pytest.approx(want, abs=1e-12)


def test_alignment_definition():
    x, y = _sphere(100, 8, 5), _sphere(100, 8, 6)
    assert alignment(x, y) == pytest.approx(np.mean(np.sum((x - y) ** 2, 1)), rel=1e-12)
    assert alignment(x, x) == 0.0
    assert alignment(sp.csr_matrix(x), y, alpha=1.0) == pytest.approx(
        np.mean(np.linalg.norm(x - y, axis=1)), rel=1e-12
    )


# ----------------------------------------------------------------- gap / separability


def test_gap_zero_for_identical_modalities_and_formula():
    x = _sphere(50, 8, 7)
    assert modality_gap(x, x).gap == 0.0
    y = _sphere(50, 8, 8)
    g = modality_gap(x, y)
    assert g.gap == pytest.approx(np.linalg.norm(x.mean(0) - y.mean(0)), rel=1e-12)
    assert g.image_centroid_norm == pytest.approx(np.linalg.norm(x.mean(0)), rel=1e-12)


def test_separability_chance_for_identical_modalities():
    x = _sphere(400, 16, 9)
    s = modality_separability(x, x, seed=0)
    # Every test point appears once per label, so any classifier is right half the time.
    assert s.accuracy == 0.5
    assert s.n_train + s.n_test == 800


def test_separability_near_one_for_far_clusters():
    rng = np.random.default_rng(10)
    c = np.zeros(16)
    c[0] = 1.0
    x = rng.standard_normal((300, 16)) * 0.1 + c
    y = rng.standard_normal((300, 16)) * 0.1 - c
    with pytest.warns(NormalizationWarning):
        s = modality_separability(x, y, seed=1)
    assert s.accuracy >= 0.99 and s.precision >= 0.99 and s.recall >= 0.99


def test_separability_split_keeps_pairs_together_and_subsamples():
    x, y = _sphere(500, 8, 11), _sphere(500, 8, 12)
    s = modality_separability(x, y, seed=0, max_pairs=100)
    assert s.n_train + s.n_test == 200 and s.n_train % 2 == 0


def test_separability_single_class_raises():
    with pytest.raises(ValueError, match="two classes, got a single class"):
        linear_separability(_sphere(20, 4, 0), np.zeros(20, int), seed=0)


# ----------------------------------------------------------------- normalisation policy


def test_unnormalised_input_is_normalised_with_warning():
    x = _sphere(200, 8, 13)
    with pytest.warns(NormalizationWarning, match="not L2-normalised"):
        got = uniformity(3.0 * x)
    assert got == pytest.approx(uniformity(x), abs=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        uniformity(x)  # unit rows: no warning


def test_zero_row_raises():
    x = _sphere(10, 4, 0)
    x[3] = 0
    with pytest.raises(ValueError, match="row 3 has norm 0"):
        modality_gap(x, x)


def test_shape_mismatch_raises():
    with pytest.raises(ValueError, match="same shape"):
        modality_gap(_sphere(10, 4, 0), _sphere(9, 4, 0))


# ----------------------------------------------------------------- diagnose


def test_diagnose_matches_the_individual_functions():
    x = _sphere(400, 12, 14)
    y = _sphere(400, 12, 15) + 0.5 * x
    y /= np.linalg.norm(y, axis=1, keepdims=True)
    r = diagnose(x, y, seed=0, k=4, chunk_size=64)
    assert r["gap"] == pytest.approx(modality_gap(x, y).gap)
    assert r["alignment"] == pytest.approx(alignment(x, y))
    assert r["uniformity_image"] == pytest.approx(uniformity(x), abs=1e-12)
    assert r["uniformity_text"] == pytest.approx(uniformity(y), abs=1e-12)
    assert r["uniformity_union"] == pytest.approx(uniformity(np.vstack([x, y])), abs=1e-12)
    assert r["entropy_image"] == pytest.approx(spherical_knn_entropy(x, k=4).entropy)
    assert r["entropy_text"] == pytest.approx(spherical_knn_entropy(y, k=4).entropy)
    assert r["separability_accuracy"] == modality_separability(x, y, seed=0).accuracy
    assert r["skipped"] == {}


def test_diagnose_sparse_skips_entropy_at_any_size_small_densifies():
    x = sp.random(60, 500, density=0.02, random_state=0, format="csr") + sp.eye(60, 500)
    y = sp.random(60, 500, density=0.02, random_state=1, format="csr") + sp.eye(60, 500)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NormalizationWarning)
        big = diagnose(x, y, seed=0, max_dense_elements=100)
        small = diagnose(x, y, seed=0)
    # the entropy of a sparse space is not meaningful at any size (it was
    # reported below the densify cap and skipped above it)
    for res in (big, small):
        assert "not meaningful" in res["skipped"]["entropy"] and "entropy_image" not in res
    assert set(small["skipped"]) == {"entropy"}
    for key in ("gap", "alignment", "uniformity_image", "uniformity_union"):
        assert big[key] == pytest.approx(small[key], abs=1e-6)
