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


def test_resolution_is_one_unit_in_the_last_place_subnormals_included():
    r = tol.resolution("float16", np.array([1.0, 1.5, 2.0**-14, 1e-6, 0.0, -3.0]))
    assert list(r) == [2.0**-10, 2.0**-10, 2.0**-24, 2.0**-24, 2.0**-24, 2.0**-9]
    assert tol.resolution("bfloat16", np.array([1.0]))[0] == 2.0**-7
    assert tol.resolution("float32", np.array([0.0]))[0] == 2.0**-149
    assert not tol.resolution("int32", np.array([5.0])).any()
    assert tol.smallest_step("float16") == 2.0**-24 and tol.smallest_step("int8") is None


def test_a_tolerance_never_goes_below_the_outputs_resolution():
    """fp16 outputs of references in fp16's subnormal range, correctly rounded: an atol scaled down to the
    references' magnitude (the ``tiny`` pattern) asks for digits fp16 cannot hold (mamba-ssm's layer norm,
    fp16 out of fp32 weights); with the output dtype the floor is one unit in its last place."""
    rng = np.random.default_rng(0)
    ref = rng.standard_normal(256) * 3e-6
    out = ref.astype(np.float16).astype(np.float64)
    scaled = tol.Tolerance(2e-3, 2e-3 * 1e-5, "float16 default; atol x 1e-5 under values=tiny")
    assert tol.compare(out, ref, scaled).bad > 0  # without the floor: a correct kernel fails
    assert tol.compare(out, ref, scaled, dtype="float16").bad == 0
    # a real error is still one: two units off in the subnormal range, and a dropped element
    off = out.copy()
    off[3] += 2 * 2.0**-24
    off[7] = 0.0 if abs(ref[7]) > 2.0**-23 else 1e-4
    assert tol.compare(off, ref, scaled, dtype="float16").bad >= 1
    assert tol.compare(off, ref, scaled, dtype="float16").worst_index in ((3,), (7,))
