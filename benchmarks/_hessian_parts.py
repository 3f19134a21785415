"""The parts of the exact ApproxNDCG Hessian diagonal, for Hessian ablations (issue 5).

For one query (notation of ``approx_gbdt._kernels``; ``c_i = G_i D'(pos^_i) / Z`` and
``e_i = G_i D''(pos^_i) / Z``; ``sig_kj = sig(alpha (s_j - s_k))``, ``w_kj = sig_kj (1 - sig_kj)``)
the diagonal Hessian of the loss ``L = -ApproxNDCG`` is ``T1 - C`` with

    B_k  = alpha^2 sum_j w_kj |c_j - c_k|                      the "bound" (>= |T1|)
    T1_k = alpha^2 sum_j w_kj (1 - 2 sig_kj) (c_j - c_k)       sigmoid curvature, in [-B, B]
    C_k  = alpha^2 [sum_j w_kj^2 e_j + e_k (sum_j w_kj)^2]     concavity of the discount (>= 0)

and ``(B + T1) / 2 = alpha^2 sum_j w_kj |c_j - c_k| (1 - rho_kj)`` with ``rho_kj`` the
sigmoid probability that the pair is in the wrong order (a LambdaMART-like weighting).
Plain O(n^2) loops: for the ablation harness only, not for training at scale.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

_LN2 = math.log(2.0)


@njit(parallel=True)
def hessian_parts(s, gains, inv_z, group_ptr, alpha, grad, B, T1, C):
    """Fill ``grad`` (of ApproxNDCG, not negated), ``B``, ``T1`` and ``C`` for every document."""
    for q in prange(group_ptr.shape[0] - 1):
        a = group_ptr[q]
        b = group_ptr[q + 1]
        n = b - a
        for i in range(a, b):
            grad[i] = 0.0
            B[i] = 0.0
            T1[i] = 0.0
            C[i] = 0.0
        if n < 2 or inv_z[q] == 0.0:
            continue
        pos = np.ones(n)
        for i in range(n):
            for j in range(n):
                if i != j:
                    pos[i] += 1.0 / (1.0 + math.exp(-alpha * (s[a + j] - s[a + i])))
        c = np.empty(n)
        e = np.empty(n)
        for i in range(n):
            p = pos[i]
            lg = math.log1p(p)
            c[i] = gains[a + i] * inv_z[q] * (-_LN2 / ((1.0 + p) * lg * lg))
            e[i] = gains[a + i] * inv_z[q] * _LN2 * (2.0 + lg) / ((1.0 + p) ** 2 * lg**3)
        a2 = alpha * alpha
        for k in range(n):
            g = 0.0
            bb = 0.0
            t1 = 0.0
            sw = 0.0
            sw2e = 0.0
            for j in range(n):
                if j == k:
                    continue
                sg = 1.0 / (1.0 + math.exp(-alpha * (s[a + j] - s[a + k])))
                w = sg * (1.0 - sg)
                dc = c[j] - c[k]
                g += w * dc
                bb += w * abs(dc)
                t1 += w * (1.0 - 2.0 * sg) * dc
                sw += w
                sw2e += w * w * e[j]
            grad[a + k] = alpha * g
            B[a + k] = a2 * bb
            T1[a + k] = a2 * t1
            C[a + k] = a2 * (sw2e + e[k] * sw * sw)


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
