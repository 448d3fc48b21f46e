"""Mutants: reference kernels with one deliberate bug each, named for the bug.

Every mutant module declares ``BUG`` (what is wrong), ``CAUGHT_BY`` (the pipecheck check expected
to catch it: "coverage", "tile_probe" or "determinism"), ``MESSAGE`` (a fragment of the failure
message), ``spec(device)`` and ``shape(device)`` (a shape that shows the bug, or None when the
generated shapes suffice). tests/unit/test_triton_mutants.py asserts each is caught.
"""
