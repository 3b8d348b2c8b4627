#!/usr/bin/env python3
"""write_exp_table.py — correctly rounded fp32 values of exp(x), the reference table of suite
vector_kernels (tests/unit/test_vector_kernels.cpp), which measures the error of the softmax's
vectorised exp (src/cpu/vector_kernels_impl.hpp) and of std::exp against it.

Each x is a float32; exp(x) is evaluated with mpmath at 200 bits and rounded to float32 by hand
(round half to even, subnormals included, overflow to +inf), so the table does not depend on
any libm. The points: every 0.25 from -104 to 88.5, both sides of the underflow (-103.97,
-87.34) and overflow (88.72) thresholds, tiny arguments, 400 seeded uniform draws in [-104, 0]
(the softmax's range: x - max <= 0) and 100 in [0, 88.7].

Output: tests/data/exp/exp_f32_reference.txt, one line per point,
  <x bits hex> <exp(x) bits hex>   # x  exp(x)
Needs: mpmath (pip install mpmath). Run: python3 reference/python/write_exp_table.py
"""
import os
import random
import struct

import mpmath

mpmath.mp.prec = 200


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def round_to_f32_bits(v) -> int:
    """bits of the float32 nearest to the positive mpf v (ties to even)."""
    if v == 0:
        return 0
    max_f32 = mpmath.mpf(2) ** 128 - mpmath.mpf(2) ** 104
    if v >= max_f32 + mpmath.mpf(2) ** 103:  # at or past the midpoint to 2^128: +inf
        return 0x7F800000
    e = int(mpmath.floor(mpmath.log(v, 2)))
    # guard against log rounding at exact powers of two
    while mpmath.mpf(2) ** e > v:
        e -= 1
    while mpmath.mpf(2) ** (e + 1) <= v:
        e += 1
    quantum_exp = max(e, -126) - 23  # ulp of the binade (subnormals: 2^-149)
    m = v / mpmath.mpf(2) ** quantum_exp
    lo = int(mpmath.floor(m))
    frac = m - lo
    if frac > 0.5 or (frac == 0.5 and lo % 2 == 1):
        lo += 1
    value = mpmath.mpf(lo) * mpmath.mpf(2) ** quantum_exp
    if value >= mpmath.mpf(2) ** 128:
        return 0x7F800000
    return bits(float(value))  # exact: value is a float32


def points():
    xs = set()
    for i in range(-416, 355):  # -104 .. 88.5 step 0.25
        xs.add(f32(i * 0.25))
    for c in (-103.97208, -103.278931, -87.33654, -87.3365479, -0.0, 1e-8, -1e-8, -2.0 ** -30, -6e-8,
              -0.34657359, 0.34657359, -0.693147180, -0.693359375, 88.72283, 88.7228394, 88.72284, -1e-4):
        xs.add(f32(c))
    rng = random.Random(20240519)
    for _ in range(400):
        xs.add(f32(rng.uniform(-104.0, 0.0)))
    for _ in range(100):
        xs.add(f32(rng.uniform(0.0, 88.7)))
    return sorted(xs, key=lambda x: (x, bits(x)))


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = os.path.join(root, "tests", "data", "exp", "exp_f32_reference.txt")
    lines = ["# exp(x) correctly rounded to float32 (mpmath, 200 bits): x bits, exp(x) bits; "
             "written by reference/python/write_exp_table.py"]
    for x in points():
        b = round_to_f32_bits(mpmath.exp(mpmath.mpf(x)))
        lines.append(f"{bits(x):08x} {b:08x}  # {x!r} {struct.unpack('<f', struct.pack('<I', b))[0]!r}")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {len(lines) - 1} points to {out}")


if __name__ == "__main__":
    main()
