"""Derive the polynomial coefficients in ``primtrace/executors/numba/vmath/coeffs.py`` (a
development tool, not part of the package).

Each approximation is a weighted minimax fit found with the Remez exchange algorithm in
mpmath at 60 digits; the coefficients are then rounded to the target dtype one at a time,
lowest order first, refitting the remaining ones after each rounding (Remez again, or
Lawson's reweighted least squares on intervals containing 0, where the remaining powers
are not a Haar system) so the rounding of the large low-order coefficients is absorbed by
the small high-order ones.

To regenerate (about 6 minutes on the shared 2-core VM, mostly the Lawson refits of EXP,
EXP2 and ERFC; needs mpmath, a sympy dependency, so present with torch)::

    python scripts/vmath_fit.py > primtrace/executors/numba/vmath/coeffs.py
"""
from __future__ import annotations

import sys

import numpy as np


def _mp():
    import mpmath
    mpmath.mp.dps = 60
    return mpmath


def remez(g, w, powers, a, b, iters=40, grid=3000):
    """Minimax fit of sum c_j v**powers[j] to g on [a, b], error weighted by w(v).

    Returns (coefficients as mpf, max weighted error)."""
    mp = _mp()
    n = len(powers)
    a, b = mp.mpf(a), mp.mpf(b)
    # Chebyshev-distributed grid, denser near the ends where the extrema crowd.
    xs = [a + (b - a) * (1 - mp.cos(mp.pi * i / (grid - 1))) / 2 for i in range(grid)]
    gs = [g(x) for x in xs]
    ws = [w(x) for x in xs]
    # interior Chebyshev nodes: weights may vanish at an end point
    ref = [xs[int(round((grid - 1) * (1 - mp.cos(mp.pi * (i + mp.mpf(1) / 2) / (n + 1))) / 2))]
           for i in range(n + 1)]
    best = None
    for _ in range(iters):
        m = mp.matrix(n + 1, n + 1)
        rhs = mp.matrix(n + 1, 1)
        for i, x in enumerate(ref):
            for j, p in enumerate(powers):
                m[i, j] = x ** p
            m[i, n] = (-1) ** i / w(x)
            rhs[i] = g(x)
        sol = mp.lu_solve(m, rhs)
        c = [sol[j] for j in range(n)]
        lev = abs(sol[n])
        err = [ws[i] * (sum(c[j] * xs[i] ** p for j, p in enumerate(powers)) - gs[i])
               for i in range(grid)]
        emax = max(abs(e) for e in err)
        if best is None or emax < best[1]:
            best = (c, emax)
        # one extremum per run of equal sign
        ext, i = [], 0
        while i < grid:
            j, k = i, i
            while j < grid and (err[j] >= 0) == (err[i] >= 0):
                if abs(err[j]) > abs(err[k]):
                    k = j
                j += 1
            ext.append(k)
            i = j
        while len(ext) > n + 1:
            if abs(err[ext[0]]) < abs(err[ext[-1]]):
                ext.pop(0)
            else:
                ext.pop()
        if len(ext) < n + 1:
            break
        ref = [xs[k] for k in ext]
        if emax - lev < lev * mp.mpf("1e-4"):
            break
    return best


def lawson(g, w, powers, a, b, iters=25, grid=600):
    """Near-minimax fit by Lawson's iteratively reweighted least squares. Unlike Remez it
    does not need a Haar system, which {v**j, ..., v**n} (j > 0) is not on an interval
    that contains 0."""
    mp = _mp()
    a, b = mp.mpf(a), mp.mpf(b)
    xs = [a + (b - a) * (1 - mp.cos(mp.pi * (i + mp.mpf(1) / 2) / grid)) / 2
          for i in range(grid)]
    gs, ws = [g(x) for x in xs], [w(x) for x in xs]
    rows = [[x ** p for p in powers] for x in xs]
    u = [mp.mpf(1) / grid] * grid
    m, best = len(powers), None
    for _ in range(iters):
        ata = mp.matrix(m, m)
        atb = mp.matrix(m, 1)
        for i in range(grid):
            wi = u[i] * ws[i] ** 2
            for j in range(m):
                atb[j] += wi * rows[i][j] * gs[i]
                for k in range(j, m):
                    ata[j, k] += wi * rows[i][j] * rows[i][k]
        for j in range(m):
            for k in range(j):
                ata[j, k] = ata[k, j]
        sol = mp.lu_solve(ata, atb)
        c = [sol[j] for j in range(m)]
        err = [abs(ws[i] * (sum(cj * r for cj, r in zip(c, rows[i])) - gs[i]))
               for i in range(grid)]
        emax = max(err)
        if best is None or emax < best[1]:
            best = (c, emax)
        tot = sum(ui * ei for ui, ei in zip(u, err))
        u = [ui * ei / tot for ui, ei in zip(u, err)]
    return best


def fit_rounded(g, w, powers, a, b, dtype):
    """Remez fit, then round coefficients to ``dtype`` lowest order first, refitting the
    rest after each one (Remez on Haar systems, Lawson on intervals containing 0).
    Returns (list of dtype coefficients, max weighted error in mp)."""
    mp = _mp()
    fixed = []
    for j in range(len(powers)):
        def gj(v, fixed=tuple(fixed)):
            return g(v) - sum(mp.mpf(float(c)) * v ** p for c, p in zip(fixed, powers))
        if j and a < 0 < b:
            c, _ = lawson(gj, w, powers[j:], a, b)
        else:
            c, _ = remez(gj, w, powers[j:], a, b)
        fixed.append(dtype(float(c[0])) if dtype is np.float64 else dtype(float(c[0])))
    # measured weighted error of the rounded coefficients
    xs = [mp.mpf(a) + (mp.mpf(b) - a) * i / 4000 for i in range(4001)]
    xs = [x for x in xs if x != 0]
    e = max(abs(w(x) * (sum(mp.mpf(float(c)) * x ** p for c, p in zip(fixed, powers)) - g(x)))
            for x in xs)
    return fixed, e


def lawson_np(t, g, w, powers, iters=60):
    """lawson() in float64 NumPy on given samples: enough for float32 targets (errors
    near 2**-28 need nothing like float64's 2**-53) and seconds instead of minutes."""
    a = t[:, None] ** np.array(powers, float)[None, :]
    u = np.full(t.size, 1.0 / t.size)
    best = None
    for _ in range(iters):
        sw = np.sqrt(u) * w
        c = np.linalg.lstsq(a * sw[:, None], g * sw, rcond=None)[0]
        err = np.abs(w * (a @ c - g))
        if best is None or err.max() < best[1]:
            best = (c, err.max())
        u = u * err
        u /= u.sum()
    return best


def fit_rounded_np(g, w, powers, a, b, dtype=np.float32, fixed=(), n=1500):
    """fit_rounded with lawson_np on n Chebyshev points of [a, b]; ``fixed`` are leading
    coefficients already chosen. Returns (coefficients, max weighted error on the points)."""
    mp = _mp()
    t = np.cos(np.pi * (np.arange(n) + 0.5) / n) * (b - a) / 2 + (a + b) / 2
    gs = np.array([float(g(mp.mpf(float(v)))) for v in t])
    ws = np.array([float(w(mp.mpf(float(v)))) for v in t])
    out = list(fixed)
    for j in range(len(out), len(powers)):
        r = gs - sum(float(c) * t ** p for c, p in zip(out, powers))
        out.append(dtype(lawson_np(t, r, ws, powers[j:])[0][0]))
    r = gs - sum(float(c) * t ** p for c, p in zip(out, powers))
    return out, float(np.abs(ws * r).max())


#: float32 erf above ERF_F32_SMALL: pieces [lo, hi) with a polynomial each in t = a - m,
#: erf = d0 + t*Q(t); d0 = erf(m) rounded, m picked near lo + 0.4 (hi - lo) so that d0 is
#: within about 2**-40 of erf(m) (the last Horner step then adds one rounding, not two).
ERF_F32_SMALL = 0.84375
ERF_F32_PIECES = ((0.84375, 2.2, 10), (2.2, 4.0, 10))


def erf_pieces_f32():
    """[(m, coefficients, max abs error)] for ERF_F32_PIECES."""
    mp = _mp()
    out = []
    for lo, hi, n in ERF_F32_PIECES:
        centre = np.float32(lo + 0.4 * (hi - lo))
        best = None
        for k in range(-3000, 3000):                 # m on a 2**-16 grid around the centre
            m = np.float32(centre + np.float32(k * 2.0 ** -16))
            v = mp.erf(mp.mpf(float(m)))
            miss = abs(v - mp.mpf(float(np.float32(float(v)))))
            if best is None or miss < best[0]:
                best = (miss, float(m))
        m = best[1]
        d0 = np.float32(float(mp.erf(mp.mpf(m))))
        c, e = fit_rounded_np(lambda t: mp.erf(t + m), lambda t: 1, list(range(n)),
                              lo - m, hi - m, fixed=(d0,))
        out.append((m, c, e))
    return out


#: erfc(x) = exp(-x*x) * H(t) / x with t = (x - K)/(x + K): H = x * erfcx(x) is smooth and
#: flat (0.31 .. 1/sqrt(pi)) in t over the whole tail, so one well-conditioned polynomial
#: covers it. (x range, K) per dtype.
ERFC_MAP = {"F32": (0.5, 10.1, 1.5), "F64": (0.5, 27.3, 2.0)}


def specs():
    """name -> (g, w, a, b) per approximation; v is the fitted variable; a None means the
    interval is [-b, b] (symmetric fits) or starts just above 0."""
    mp = _mp()
    sq = mp.sqrt

    def odd(f):  # f(r) = r + r^3 * P(z), z = r^2: target P and weight r^3/f(r)
        return (lambda z: (f(sq(z)) - sq(z)) / sq(z) ** 3,
                lambda z: sq(z) ** 3 / f(sq(z)))

    def erfc_map(tag):
        lo, hi, K = (mp.mpf(v) for v in ERFC_MAP[tag])

        def x_of(t):
            return K * (1 + t) / (1 - t)
        h = (lambda t: x_of(t) * mp.erfc(x_of(t)) * mp.exp(x_of(t) ** 2))
        return (h, lambda t: 1 / h(t), (lo - K) / (lo + K), (hi - K) / (hi + K))

    tiny = mp.mpf("1e-9")
    out = {}
    # e^r = 1 + r + r^2 P(r): weight against expm1 so expm1 can share it
    out["EXP"] = (lambda r: (mp.expm1(r) - r) / r ** 2, lambda r: r ** 2 / abs(mp.expm1(r)),
                  None, mp.log(2) / 2 + mp.mpf("2e-4"))
    # 2^r = 1 + r P(r)
    out["EXP2"] = (lambda r: (mp.power(2, r) - 1) / r, lambda r: abs(r) / mp.power(2, r),
                   None, mp.mpf("0.5"))
    # log((1+s)/(1-s)) = 2s + s^3 P(z), z = s^2, |s| <= (sqrt2-1)/(sqrt2+1)
    smax = (sq(2) - 1) / (sq(2) + 1)
    out["LOG"] = (lambda z: (mp.log((1 + sq(z)) / (1 - sq(z))) - 2 * sq(z)) / sq(z) ** 3,
                  lambda z: sq(z) ** 3 / mp.log((1 + sq(z)) / (1 - sq(z))), tiny, smax ** 2)
    out["SIN"] = (*odd(mp.sin), tiny, (mp.pi / 4) ** 2 * mp.mpf("1.0001"))
    # sin on [-pi/2, pi/2] (the float32 "near" sin and cos: one polynomial, evaluated in float64)
    out["SIN_NEAR"] = (*odd(mp.sin), tiny, (mp.pi / 2) ** 2 * mp.mpf("1.0001"))
    out["COS"] = (lambda z: (mp.cos(sq(z)) - 1 + z / 2) / z ** 2,
                  lambda z: z ** 2 / mp.cos(sq(z)), tiny, (mp.pi / 4) ** 2 * mp.mpf("1.0001"))
    out["ATAN"] = (*odd(mp.atan), tiny, mp.mpf("0.4375") ** 2)
    out["ASIN"] = (*odd(mp.asin), tiny, mp.mpf("0.25"))
    out["TANH"] = (*odd(mp.tanh), tiny, mp.mpf("0.55") ** 2)
    out["SINH"] = (*odd(mp.sinh), tiny, mp.mpf(1))
    # erf(x) = x + x E(z), z = x^2
    out["ERF"] = (lambda z: mp.erf(sq(z)) / sq(z) - 1,
                  lambda z: sq(z) / mp.erf(sq(z)), tiny, mp.mpf("0.84375") ** 2)
    out["ERFC_F32"] = erfc_map("F32")
    out["ERFC_F64"] = erfc_map("F64")
    return out


#: name -> ((dtype tag, spec name, number of coefficients), ...)
PLAN = {
    "EXP": (("F32", "EXP", 6), ("F64", "EXP", 11)),
    "EXP2": (("F32", "EXP2", 6), ("F64", "EXP2", 11)),
    "LOG": (("F32", "LOG", 3), ("F64", "LOG", 8)),
    "SIN": (("F32", "SIN", 4), ("F64", "SIN", 6)),
    "COS": (("F32", "COS", 4), ("F64", "COS", 6)),
    "SIN_NEAR": (("F32", "SIN_NEAR", 4), ("F64", "SIN_NEAR", 5)),
    "ATAN": (("F32", "ATAN", 6), ("F64", "ATAN", 11)),
    "ASIN": (("F32", "ASIN", 6), ("F64", "ASIN", 13)),
    "TANH": (("F32", "TANH", 6), ("F64", "TANH", 14)),
    "SINH": (("F32", "SINH", 4), ("F64", "SINH", 8)),
    "ERF": (("F32", "ERF", 7), ("F64", "ERF", 12)),
    "ERFC": (("F32", "ERFC_F32", 11), ("F64", "ERFC_F64", 24)),
}

HEADER = '''"""Polynomial coefficients for vmath, lowest order first.

Generated by ``scripts/vmath_fit.py`` (weighted minimax fits by the Remez algorithm, rounded
to the dtype one coefficient at a time); the comment above each array is the maximum
weighted (relative) error of the rounded polynomial on its interval, before evaluation
rounding.
"""
import numpy as np
'''


def format_array(name, values, dtype_name):
    """Python source for one coefficient array, wrapped at 92 columns."""
    lines, cur = [], f"{name} = np.array(["
    for v in values:
        piece = repr(float(v)) + ", "
        if len(cur) + len(piece) > 80:
            lines.append(cur.rstrip())
            cur = "    "
        cur += piece
    lines.append(cur.rstrip(", ") + f"], np.{dtype_name})")
    return "\n".join(lines)


def main(names=None):
    mp = _mp()
    sp = specs()
    print(HEADER)
    for name in names or [*PLAN, "ERF_PIECES"]:
        if name == "ERF_PIECES":
            print(f"\n#: float32 erf above {ERF_F32_SMALL}: (lo, hi, m) per piece, then each\n"
                  "#: piece's d0 + t*Q(t), t = |x| - m")
            pieces = erf_pieces_f32()
            bounds = tuple((lo, hi, m) for (lo, hi, _), (m, _, _) in
                           zip(ERF_F32_PIECES, pieces))
            print(f"ERF_PIECES_F32 = {bounds!r}")
            for i, (_, c, e) in enumerate(pieces):
                print(f"# max abs error {e:.3g}")
                print(format_array(f"ERF_PIECE{i}_F32", c, "float32"))
            continue
        for tag, key, n in PLAN[name]:
            g, w, a, b = sp[key]
            a = -b if a is None else a
            dt = np.float32 if tag == "F32" else np.float64
            c, e = fit_rounded(g, w, list(range(n)), a, b, dt)
            print(f"# max weighted error {mp.nstr(e, 3)}")
            print(format_array(f"{name}_{tag}", c, dt.__name__))
            if name == "ERFC":
                print(f"#: (x_min, x_max, K) of the t = (x-K)/(x+K) map\n"
                      f"ERFC_MAP_{tag} = {ERFC_MAP[tag]!r}")
            sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:] or None)
