"""Loads scripts/perf_rates.py (the perf gate's rate simulation, used by the evidence scripts) once per
session, under the name the scripts import it by, so that they and the tests share one module."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "perf_rates.py"
_spec = importlib.util.spec_from_file_location("perf_rates", _SCRIPT)
assert _spec and _spec.loader
perf_rates = sys.modules.get(_spec.name) or importlib.util.module_from_spec(_spec)
if _spec.name not in sys.modules:
    sys.modules[_spec.name] = perf_rates  # dataclasses look their module up while the class is built
    _spec.loader.exec_module(perf_rates)

NoiseModel = perf_rates.NoiseModel
RateEstimate = perf_rates.RateEstimate
resample_rates = perf_rates.resample_rates
simulate_rates = perf_rates.simulate_rates
