"""The parts of the exact ApproxNDCG Hessian diagonal, for Hessian ablations.

For one query (notation of ``approx_gbdt._kernels``; ``c_i = G_i D'(pos^_i) / Z`` and
``e_i = G_i D''(pos^_i) / Z``; ``sig_kj = sig(alpha (s_j - s_k))``, ``w_kj = sig_kj (1 - sig_kj)``)
the diagonal Hessian of the loss ``L = -ApproxNDCG`` is ``T1 - C`` with

    B_k  = alpha^2 sum_j w_kj |c_j - c_k|                      the "bound" (>= |T1|)
    T1_k = alpha^2 sum_j w_kj (1 - 2 sig_kj) (c_j - c_k)       sigmoid curvature, in [-B, B]
    C_k  = alpha^2 [sum_j w_kj^2 e_j + e_k (sum_j w_kj)^2]     concavity of the discount (>= 0)

and ``(B + T1) / 2 = alpha^2 sum_j w_kj |c_j - c_k| (1 - rho_kj)`` with ``rho_kj`` the
sigmoid probability that the pair is in the wrong order (a LambdaMART-like weighting).
The package's exact O(n^2) reference loops: for the ablation harness only, not for training
at scale.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from approx_gbdt import _reference as R
from approx_gbdt._measure_terms import TERM_LOG, _term


@njit(parallel=True)
def hessian_parts(s, gains, inv_z, group_ptr, alpha, grad, B, T1, C):
    """Fill ``grad`` (of ApproxNDCG, not negated), ``B``, ``T1`` and ``C`` for every document,
    with the package's exact O(n^2) reference loops (``_reference.chain_query``)."""
    a2 = alpha * alpha
    for q in prange(group_ptr.shape[0] - 1):
        a = group_ptr[q]
        b = group_ptr[q + 1]
        n = b - a
        if n < 2 or inv_z[q] == 0.0:
            for i in range(a, b):
                grad[i] = B[i] = T1[i] = C[i] = 0.0
            continue
        pos = np.empty(n)
        R.positions_query(s[a:b], alpha, pos)
        c = np.empty(n)
        e = np.empty(n)
        for i in range(n):
            _, d1, d2 = _term(TERM_LOG, pos[i], 0, 1.0, 0.0)
            c[i] = gains[a + i] * d1 * inv_z[q]
            e[i] = gains[a + i] * d2 * inv_z[q]
        g = np.empty(n)
        bnd = np.empty(n)
        acc_a = np.empty(n)  # sum_j w (1 - 2 sig_kj)(c_j - c_k)
        acc_b = np.empty(n)  # sum_j w^2 e_j
        acc_w = np.empty(n)  # sum_j w
        R.chain_query(s[a:b], alpha, c, e, True, g, bnd, acc_a, acc_b, acc_w)
        for i in range(n):
            grad[a + i] = alpha * g[i]
            B[a + i] = a2 * bnd[i]
            T1[a + i] = a2 * acc_a[i]
            C[a + i] = a2 * (acc_b[i] + e[i] * acc_w[i] * acc_w[i])


def combine(mode, B, T1, C, *, floor=0.1, gamma=1.0):
    """A positive Hessian approximation from the parts (``mixed`` is the package default)."""
    if mode == "mixed":  # max(exact, floor B)
        return np.maximum(T1 - C, floor * B)
    if mode == "gmix":  # max(T1 - gamma C, floor B)
        return np.maximum(T1 - gamma * C, floor * B)
    if mode == "t1":  # the exact diagonal without the discount's concavity
        return np.maximum(T1, floor * B)
    if mode == "half":  # LambdaMART-like: sum w |dc| (1 - rho)
        return np.maximum(0.5 * (B + T1), floor * B)
    if mode == "halfc":
        return np.maximum(0.5 * (B + T1) - C, floor * B)
    if mode == "absx":  # |exact|, floored
        return np.maximum(np.abs(T1 - C), floor * B)
    raise ValueError(f"unknown Hessian combination {mode!r}")
