"""The kernel model: what a kernel is (:mod:`.spec`), the shapes, value patterns and memory layouts it is
checked at (:mod:`.shapes`, :mod:`.values`, :mod:`.layouts`), the configs of an autotuned kernel
(:mod:`.autotune`), the tolerances of its outputs (:mod:`.tolerance`), the dimension expressions of its
tensors (:mod:`.dimexpr`) and the test cases assembled from them (:mod:`.cases`).

``spec`` is the floor: it imports none of the others. What validating a spec needs from them is handed
to it here, once, before any of them can be used.
"""

from __future__ import annotations

from . import autotune, dimexpr, layouts, spec, tolerance, values

spec.wire(spec._Model(value_names=values.validate_names, autotune_configs=autotune.configs,
                      layouts=layouts.validate_spec, tolerance_problem=tolerance.problem,
                      dim_expr=dimexpr.parse))
