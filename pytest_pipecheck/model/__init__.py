"""The kernel model: what a kernel is (:mod:`.spec`, with its tensors in :mod:`.tensor`, one shape in
:mod:`.shape` and its preconditions in :mod:`.preconditions`), the shapes, value patterns and memory layouts
it is checked at (:mod:`.shapes`, :mod:`.values`, :mod:`.layouts`), the configs of an autotuned kernel
(:mod:`.autotune`), the tolerances of its outputs (:mod:`.tolerance`), the dimension expressions of its
tensors (:mod:`.dimexpr`) and the test cases assembled from them (:mod:`.cases`).

Two layers. Below :mod:`.spec` lie what a spec's own validation needs: :mod:`.dimexpr`, :mod:`.tolerance`,
:mod:`.autotune` and :mod:`.names` (the value patterns and layouts a spec may name); they import no other
module of the model. The spec's parts, :mod:`.tensor`, :mod:`.shape` and :mod:`.preconditions`, import no
module of the model but those. Above it lie the generators, which work on specs (shapes, values, layouts,
cases).
"""
