from __future__ import annotations

import math

import numpy as np

from pytest_pipecheck.model import tolerance as tol


def test_defaults_by_dtype_and_override_order():
    assert tol.default_tolerance("float16").rtol == 2e-3
    assert tol.default_tolerance("bfloat16").atol == 1.6e-2
    assert tol.default_tolerance("int32").short == "exact"
    t = tol.resolve("float16", "c", spec_rtol={"c": 1e-2}, config_atol=5e-3, rtol=1e-1)
    assert (t.rtol, t.atol) == (1e-1, 5e-3) and "argument" in t.source and "config" in t.source


def test_nan_never_passes_even_with_huge_tolerance():
    t = tol.Tolerance(1e9, 1e9, "test")
    c = tol.compare(np.array([1.0, math.nan]), np.array([1.0, 2.0]), t)
    assert c.bad == 1 and c.nan == 1 and c.worst_index == (1,)


def test_worst_element_and_fraction():
    ref = np.arange(12, dtype=np.float64).reshape(3, 4)
    out = ref.copy()
    out[2, 1] += 0.5
    out[0, 3] += 0.01
    c = tol.compare(out, ref, tol.default_tolerance("float16"))
    assert c.bad == 2 and c.worst_index == (2, 1) and abs(c.fraction - 2 / 12) < 1e-12


def test_calibrated_is_k_times_same_precision_error():
    t = tol.calibrated("float16", 1e-3, 1.0, 2.0)
    assert abs(t.atol - (2e-3 + 2.0**-10)) < 1e-12 and t.rtol == 0 and "calibrated" in t.source
