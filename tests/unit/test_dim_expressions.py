"""Dimension expressions in ``Tensor.dims`` (pytest_pipecheck/model/dimexpr.py and its use by the spec, the shape
generator, the guarded allocations, the messages and the tile probe), on pure-torch kernels."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import pytest

torch = pytest.importorskip("torch")

from pytest_pipecheck.checks import arrays, correctness, coverage, launch, tile_probe  # noqa: E402
from pytest_pipecheck.model import layouts  # noqa: E402
from pytest_pipecheck.model.preconditions import Divisible  # noqa: E402
from pytest_pipecheck.model.shape import Shape  # noqa: E402
from pytest_pipecheck.model.shapes import generate, shape_bytes  # noqa: E402
from pytest_pipecheck.model.spec import KernelSpec  # noqa: E402
from pytest_pipecheck.model.tensor import Tensor  # noqa: E402
from pytest_pipecheck.results import PipecheckError, PipecheckFailure, Verdict  # noqa: E402

GROUP = 16


def parse(text: str):
    # imported here, so that the other tests run (and fail on their own) where the module does not exist
    from pytest_pipecheck.model.dimexpr import parse

    return parse(text)


def _dimexpr_error() -> type[Exception]:
    from pytest_pipecheck.model.dimexpr import DimExprError

    return DimExprError


def _unpack(w: torch.Tensor, k: int) -> torch.Tensor:
    rows = torch.arange(k, device=w.device)  # the GPU tier's arrays are on the device
    return (w.to(torch.int64)[rows // 8] >> ((rows % 8) * 4)[:, None]) & 0xF


def _dequant_ref(a, d):
    k = d["K"]
    return {"out": (_unpack(a["w"], k) - 8).double() * a["scales"].double()[torch.arange(k, device=a["scales"].device) // GROUP]}


def _dequant(a, d):
    a["out"].copy_(_dequant_ref(a, d)["out"].float())


def _packed(shape, gen):
    return torch.randint(-2**31, 2**31 - 1, shape, generator=gen, dtype=torch.int64).to(torch.int32)


def _dequant_spec(launch=_dequant, name="dequant", **kw):
    args = dict(tensors=[Tensor("w", ("K/8", "N"), "int32", init=_packed),
                         Tensor("scales", ("K/group", "N"), "float16"),
                         Tensor("out", ("K", "N"), "float32", role="output")],
                tiles={"K": 32, "N": 16}, loop_dim="K", constants={"group": GROUP})
    args.update(kw)
    return KernelSpec(name, launch, _dequant_ref, **args)


# ----------------------------------------------------------------------------- the parser


@pytest.mark.parametrize("text, names, sizes, value", [
    ("K", ("K",), {"K": 7}, 7),
    ("K/8", ("K",), {"K": 64}, 8),
    ("K/group", ("K", "group"), {"K": 256, "group": 128}, 2),
    ("2*N", ("N",), {"N": 5}, 10),
    ("(M + 1) * 2 - 2", ("M",), {"M": 3}, 6),
    ("2*K/8", ("K",), {"K": 12}, 3),
    ("+K - -1", ("K",), {"K": 4}, 5),
    ("M*N", ("M", "N"), {"M": 3, "N": 4}, 12),
    ("group", ("group",), {"group": 128}, 128),
    ("8", (), {}, 8),
    ("cdiv(L, chunk)", ("L", "chunk"), {"L": 129, "chunk": 64}, 3),
    ("cdiv(L, 64)", ("L",), {"L": 128}, 2),
    ("cdiv(L, chunk) * chunk", ("L", "chunk"), {"L": 65, "chunk": 16}, 80),
    ("cdiv(L + 1, 2)", ("L",), {"L": 4}, 3),
])
def test_allowed_expressions(text, names, sizes, value):
    e = parse(text)
    assert e.names == names and e.text == text
    assert e.value(sizes) == value


@pytest.mark.parametrize("text, fragment", [
    ("K//8", r"'//' \(use '/', which is exact division\) is not allowed"),
    ("K%8", "'%' is not allowed"),
    ("K**2", r"'\*\*' is not allowed"),
    ("K<<1", "'<<' is not allowed"),
    ("abs(K)", "a function call is not allowed"),
    ("cdiv(K)", r"cdiv takes two arguments, cdiv\(a, b\)"),
    ("cdiv(K, 2, 3)", r"cdiv takes two arguments"),
    ("cdiv(K, b=2)", r"cdiv takes two arguments"),
    ("K.real", r"'K.real' \(an attribute or subscript\) is not allowed"),
    ("K[0]", "an attribute or subscript"),
    ("K/2.5", r"the literal 2.5 \(only integers\) is not allowed"),
    ("'K'", "the literal 'K'"),
    ("True", "the literal True"),
    ("K if M else N", "ifexp syntax"),
    ("K == 8", "compare syntax"),
    ("lambda: 1", "lambda syntax"),
    ("__import__('os').system('true')", "function call is not allowed"),
    ("K/", "not an expression"),
    ("K 8", "not an expression"),
    ("", "non-empty string"),
    ("K+" * 150 + "K", "at most 200 characters"),
])
def test_refused_expressions_say_why(text, fragment):
    with pytest.raises(_dimexpr_error(), match=fragment) as info:
        parse(text)
    assert "only dimension names, constants, integer literals, + - * /, parentheses and cdiv(a, b)" in str(info.value) or \
        fragment in ("non-empty string", "at most 200 characters")


@pytest.mark.parametrize("text, sizes, fragment", [
    ("K/8", {"K": 100}, r"K/8 is 100/8, not a whole number \('/' is exact division\)"),
    ("(K+8)/16", {"K": 16}, r"\(K\+8\)/16 is 24/16, not a whole number"),
    ("2*(K/8)", {"K": 12}, r"K / 8 is 12/8, not a whole number"),
    ("K-8", {"K": 8}, "K-8 is 0, not a positive size"),
    ("K-8", {"K": 3}, "K-8 is -5, not a positive size"),
    ("K/(g-g)", {"K": 8, "g": 2}, "divides by zero"),
    ("K/g", {"K": 8}, "unknown name 'g'"),
    ("cdiv(K, g-g)", {"K": 8, "g": 2}, "divides by 0, not a positive number"),
])
def test_values_that_are_not_sizes(text, sizes, fragment):
    with pytest.raises(_dimexpr_error(), match=fragment):
        parse(text).value(sizes)


def test_analysis_multiples_divisibility_and_reach():
    consts = {"group": 128}
    assert parse("K/8").multiple(consts) == ("K", Fraction(1, 8))
    assert parse("K/group").multiple(consts) == ("K", Fraction(1, 128))
    assert parse("2*N").multiple(consts) == ("N", 2)
    assert parse("K+8").multiple(consts) is None and parse("M*K").multiple(consts) is None
    assert parse("M+K").multiple(consts) is None and parse("group").multiple(consts) is None
    assert parse("K/8").divisibility(consts) == {"K": 8}
    assert parse("K/group").divisibility(consts) == {"K": 128}
    assert parse("2*K/8").divisibility(consts) == {"K": 4}
    assert parse("(K/8)/4").divisibility(consts) == {"K": 32}
    assert parse("M/2 + N/3").divisibility(consts) == {"M": 2, "N": 3}
    assert parse("(K+8)/16").divisibility(consts) == {} and parse("M*K/8").divisibility(consts) == {}
    tiles = {"K": 64, "N": 16, "M": 4}
    assert parse("K/8").reach(tiles, consts) == 8
    assert parse("K/group").reach(tiles, consts) == 1  # half a row: one
    assert parse("2*N").reach(tiles, consts) == 32
    assert parse("K-8").reach(tiles, consts) == 72  # '-' read as '+': an upper bound
    assert parse("M*N").reach(tiles, consts) == 64
    assert parse("B*N").reach(tiles, consts) == 16  # an untiled dimension counts 1
    assert parse("group").reach(tiles, consts) == 1


# ----------------------------------------------------------------------------- the spec


def test_spec_reads_expressions_with_constants():
    spec = _dequant_spec()
    assert spec.dim_names == ("K", "N") and spec.constants == {"group": GROUP}
    assert [spec.dims_of(t) for t in spec.tensors] == [("K", "N"), ("K", "N"), ("K", "N")]
    shape = Shape(K=48, N=9)
    assert [spec.shape_of(t, shape) for t in spec.tensors] == [(6, 9), (3, 9), (48, 9)]
    # the divisibility the expressions need joins the preconditions, one per dimension, saying why
    implied = [p for p in spec.preconditions if isinstance(p, Divisible)]
    assert implied == [Divisible("K", 16)]
    assert implied[0].reason == "implied by tensor 'w' dim 'K/8' and tensor 'scales' dim 'K/group'"
    assert spec.dim_tiles == {"K": 32, "N": 16, "K/8": 4, "K/group": 2}


def test_a_declared_precondition_that_implies_it_adds_none_and_replace_derives_again():
    spec = _dequant_spec(preconditions=[Divisible("K", 32)])
    assert spec.preconditions == (Divisible("K", 32),)
    other = dataclasses.replace(_dequant_spec(), constants={"group": 64})
    assert [(p.dim, p.n) for p in other.preconditions] == [("K", 64)]
    assert other.check_shape("K64-N3") == Shape(K=64, N=3)


@pytest.mark.parametrize("tensors, constants, fragment", [
    ([Tensor("w", ("K/grp", "N"))], {"group": 8},
     r"spec 'exprs': tensor 'w' dim 'K/grp': unknown name 'grp': neither a dimension of the spec \(a plain dim of "
     r"some tensor, a tiles key or the loop_dim: K, N\) nor one of its constants \(group\)"),
    ([Tensor("w", ("K//8", "N"))], {}, r"spec 'exprs': tensor 'w' dim 'K//8': '//' \(use '/'"),
    ([Tensor("w", ("K/N", "N"))], {},
     r"tensor 'w' dim 'K/N': divides by 'N', which holds the dimension 'N': a divisor may hold only integer "
     r"literals and constants"),
    ([Tensor("w", ("K*(8/3)", "N"))], {}, r"tensor 'w' dim 'K\*\(8/3\)': 8 / 3 is 8/3, not a whole number"),
    ([Tensor("w", ("group/3", "N"))], {"group": 8}, r"tensor 'w' dim 'group/3': group/3 is 8/3, not a whole"),
    ([Tensor("w", ("4-4", "N"))], {}, r"tensor 'w' dim '4-4': 4-4 is 0, not a positive size"),
    ([Tensor("w", ("group-9", "N"))], {"group": 8}, r"tensor 'w' dim 'group-9': group-9 is -1, not a positive size"),
    ([Tensor("w", ("K", "N"))], {"K": 8}, r"constant 'K' is also a dimension"),
    ([Tensor("w", ("K", "N"))], {"2x": 8}, r"constants names '2x': a constant's name must be an identifier"),
    ([Tensor("w", ("K", "N"))], {"g": 0}, r"constant g=0 must be an integer >= 1"),
    ([Tensor("w", ("K", "N"))], {"g": True}, r"constant g=True must be an integer >= 1"),
])
def test_bad_expressions_name_the_spec_the_tensor_and_the_expression(tensors, constants, fragment):
    with pytest.raises(PipecheckError, match=fragment):
        KernelSpec("exprs", lambda a, d: None, lambda a, d: {}, [*tensors, Tensor("y", ("K", "N"), role="output")],
                   tiles={"K": 16, "N": 16}, loop_dim="K", constants=constants)


def test_constants_must_be_a_mapping():
    with pytest.raises(PipecheckError, match=r"spec 'dequant': constants must be a dict of name: integer"):
        _dequant_spec(constants=[("group", 16)])


def test_loop_dimension_inside_an_expression_of_an_input_is_the_loop():
    # K appears on its own only in the output; the inputs hold it as K/8 and K/group
    spec = _dequant_spec()
    assert spec.loop_dim == "K" and spec.loop_trips(Shape(K=48, N=3)) == 2


def test_a_shape_where_an_expression_is_not_a_size_is_rejected_naming_tensor_expression_and_shape():
    spec = _dequant_spec()
    with pytest.raises(PipecheckError, match=r"spec 'dequant': input shape K40-N3 violates a declared precondition: "
                                             r"K=40 is not a multiple of 16 \(implied by tensor 'w' dim 'K/8' and "
                                             r"tensor 'scales' dim 'K/group'\)"):
        spec.check_shape("K40-N3")
    off = KernelSpec("offset", lambda a, d: None, lambda a, d: {},
                     [Tensor("x", ("K-8", "N")), Tensor("y", ("K", "N"), role="output")],
                     tiles={"K": 16, "N": 16}, loop_dim="K")
    with pytest.raises(PipecheckError, match=r"spec 'offset': shape K8-N3 gives no valid size to tensor 'x' dim "
                                             r"'K-8': K-8 is 0, not a positive size"):
        off.check_shape("K8-N3")
    with pytest.raises(PipecheckError, match=r"spec 'offset': tensor 'x' dim 'K-8' at K8-N3: K-8 is 0"):
        off.shape_of(off.tensor("x"), Shape(K=8, N=3))


# ----------------------------------------------------------------------------- generated shapes


@pytest.mark.parametrize("level", ["small", "medium", "large"])
def test_generated_shapes_keep_every_expression_a_positive_whole_size(level):
    spec = _dequant_spec()
    shapes = generate(spec, level, sm_count=3)
    assert shapes and all(s["K"] % 16 == 0 for s in shapes), shapes
    for s in shapes:
        assert [spec.shape_of(t, s) for t in spec.tensors][:2] == [(s["K"] // 8, s["N"]), (s["K"] // GROUP, s["N"])]
    # still ragged: a partial last K tile of 32 and several trip counts
    assert any(s["K"] % 32 for s in shapes) and len({spec.loop_trips(s) for s in shapes}) >= 3


def test_generated_shapes_drop_sizes_no_divisibility_can_promise():
    spec = KernelSpec("affine", lambda a, d: None, lambda a, d: {},
                      [Tensor("x", ("(K+16)/16", "N")), Tensor("z", ("K-8", "N")),
                       Tensor("y", ("K", "N"), role="output")],
                      tiles={"K": 16, "N": 16}, loop_dim="K")
    assert not [p for p in spec.preconditions if isinstance(p, Divisible)]
    shapes = generate(spec, "large")
    assert shapes and all(s["K"] % 16 == 0 and s["K"] > 8 for s in shapes), shapes
    never = dataclasses.replace(spec, tensors=[Tensor("x", ("(K+8)/16", "N")), Tensor("y", ("K", "N"), role="output")])
    with pytest.raises(PipecheckError, match=r"spec 'affine': no generated shape meets the preconditions \(\); the "
                                             r"first refused, K9-N9: tensor 'x' dim '\(K\+8\)/16': \(K\+8\)/16 is "
                                             r"17/16, not a whole number"):
        generate(never)


def _chunk_sums_ref(a, d):
    x = a["x"].double()
    pad = -d["L"] % CHUNK
    return {"s": torch.nn.functional.pad(x, (0, pad)).reshape(x.shape[0], -1, CHUNK).sum(-1)}


def _chunk_sums(drop_ragged: bool):
    def launch(a, d):
        whole = d["L"] // CHUNK if drop_ragged else -(-d["L"] // CHUNK)  # the bug: L // chunk chunks
        out = _chunk_sums_ref(a, d)["s"].float()
        a["s"][:, :whole].copy_(out[:, :whole])
    return launch


CHUNK = 16


def _chunk_spec(drop_ragged: bool = False) -> KernelSpec:
    return KernelSpec("chunk_sums", _chunk_sums(drop_ragged), _chunk_sums_ref,
                      [Tensor("x", ("B", "L"), "float32"), Tensor("s", ("B", "cdiv(L, chunk)"), "float32", role="output")],
                      tiles={"B": 1, "L": CHUNK}, loop_dim="L", constants={"chunk": CHUNK})


def test_ceiling_division_implies_no_divisibility_so_ragged_chunks_are_generated():
    """``cdiv(L, chunk)`` chunks: the generated lengths keep a ragged last chunk (L not a multiple of chunk), which
    ``L/chunk`` would have aligned away; the output has one more chunk there."""
    spec = _chunk_spec()
    assert not [p for p in spec.preconditions if isinstance(p, Divisible)]
    shapes = generate(spec, "medium")
    ragged = [s for s in shapes if s["L"] % CHUNK]
    assert ragged, shapes
    s = ragged[0]
    assert spec.shape_of(spec.tensors[1], s) == (s["B"], -(-s["L"] // CHUNK))
    # the expression's divisor may not hold a dimension, as '/''s may not
    with pytest.raises(PipecheckError, match=r"divides by 'B', which holds the dimension 'B'"):
        dataclasses.replace(spec, tensors=[Tensor("x", ("B", "L")), Tensor("s", ("B", "cdiv(L, B)"), role="output")])


@pytest.mark.pipecheck(expect_failures=True)
def test_coverage_catches_a_dropped_ragged_chunk_at_a_generated_shape(pipecheck):
    ragged = next(s for s in generate(_chunk_spec(), "small") if s["L"] % CHUNK)
    assert coverage.check_coverage(pipecheck, _chunk_spec(), Shape(**ragged)).verdict is Verdict.PASS
    with pytest.raises(PipecheckFailure, match="never written"):
        coverage.check_coverage(pipecheck, _chunk_spec(drop_ragged=True), Shape(**ragged))


def test_generated_shapes_align_a_scaled_multiple():
    spec = KernelSpec("pairs", lambda a, d: None, lambda a, d: {},
                      [Tensor("x", ("M", "3*K/4")), Tensor("y", ("M", "K"), role="output")],
                      tiles={"M": 4, "K": 32}, loop_dim="K")
    assert [(p.dim, p.n) for p in spec.preconditions] == [("K", 4)]
    assert all(s["K"] % 4 == 0 for s in generate(spec, "medium"))


# ----------------------------------------------------------------------------- guards


def test_guard_bands_follow_the_expression_tiles():
    spec = KernelSpec("guards", lambda a, d: None, lambda a, d: {},
                      [Tensor("w", ("K/8", "N"), "int32"), Tensor("s", ("K/group", "N")), Tensor("x", ("M", "2*N")),
                       Tensor("g", ("group", "N")), Tensor("p", ("M*N",)), Tensor("y", ("M", "K", "N"), role="output")],
                      tiles={"M": 4, "K": 64, "N": 16}, loop_dim="K", constants={"group": 128},
                      blocks_per_program={"K": 2})
    guards = {t.name: spec.axis_guard_tiles(t) for t in spec.tensors}
    # a program covers 2 K tiles of 64: 128 rows of K, 16 rows of K/8, 1 row of K/group
    assert guards == {"w": [16, 16], "s": [1, 16], "x": [4, 32], "g": [1, 16], "p": [64], "y": [4, 128, 16]}


def test_guarded_allocation_of_an_expression_tensor_holds_a_tile_past_its_end(pipecheck):
    spec = _dequant_spec()
    shape = Shape(K=48, N=9)
    inputs = launch._alloc_inputs(pipecheck, spec, shape, {
        "w": torch.zeros(6, 9, dtype=torch.int32), "scales": torch.ones(3, 9, dtype=torch.float16)})
    w, s = inputs["w"], inputs["scales"]
    assert w.shape == (6, 9) and s.shape == (3, 9) and tuple(w.array.shape) == (6, 9)
    for g, rows in ((w, 4), (s, 2)):  # tile_K/8 and tile_K/group rows, and a whole N tile
        last = g.offset + sum((n - 1) * st for n, st in zip(g.shape, g.strides))
        after = g.buffer.numel() - last - 1
        assert after >= rows * g.strides[0] + 16 * g.strides[1] + layouts.GUARD_MIN, (g.name, after)
    # what the shape generator budgets is what the checks allocate
    allocated = sum(g.buffer.numel() * g.buffer.element_size() for g in inputs.values())
    out = launch._alloc_outputs(pipecheck, spec, shape)["out"]
    allocated += out.buffer.numel() * out.buffer.element_size()
    assert shape_bytes(spec, shape) >= allocated


# ----------------------------------------------------------------------------- messages


def test_describe_index_names_expression_tiles_and_copies():
    tiles = {"K": 32, "N": 16, "K/8": 4, "2*N": ("N", 2, 16)}
    assert arrays.describe_index((5, 3), ("K/8", "N"), tiles, (6, 9)) == \
        "[5, 3] (K/8 tile 1 of 2 (last, partial 2/4), N tile 0 of 1 (partial 9/16))"
    assert arrays.describe_index((1, 40), ("M", "2*N"), tiles, (2, 66)) == "[1, 40] (2*N copy 1 of 2, N tile 0 of 3)"
    assert arrays.describe_index((1, 32), ("M", "2*N"), tiles, (2, 66)) == \
        "[1, 32] (2*N copy 0 of 2, N tile 2 of 3 (last, partial 1/16))"
    assert arrays.describe_index((1, 40), ("M", "2*N"), {"2*N": ("N", 2, 0)}, (2, 66)) == "[1, 40] (2*N copy 1 of 2)"


@pytest.mark.pipecheck(expect_failures=True)
def test_coverage_names_an_unwritten_element_of_a_fused_output_by_copy_and_tile(pipecheck):
    def first_half(a, d):
        a["y"][:, :d["N"]] = a["x"].clamp(min=0)

    spec = KernelSpec("crelu_first_half", first_half,
                      lambda a, d: {"y": torch.cat([a["x"].double().clamp(min=0), (-a["x"].double()).clamp(min=0)], 1)},
                      [Tensor("x", ("M", "N"), "float32"), Tensor("y", ("M", "2*N"), "float32", role="output")],
                      tiles={"M": 2, "N": 16}, loop_dim="N")
    with pytest.raises(PipecheckFailure, match=r"output 'y': 60 of 120 \(50.00%\) elements never written \(still "
                                               r"poison\); first at \[0, 20\] \(M tile 0 of 2, 2\*N copy 1 of 2, N tile "
                                               r"0 of 2\)"):
        coverage.check_coverage(pipecheck, spec, Shape(M=3, N=20))


# ----------------------------------------------------------------------------- the tile probe


def test_probe_windows_of_expression_axes():
    spec = _dequant_spec()
    w, scales, out = spec.tensors
    assert spec.loop_windows(w, 32, 48, 48) == (0, [(4, 6)])
    assert spec.loop_windows(scales, 32, 48, 48) == (0, [(2, 3)])
    assert spec.loop_windows(out, 32, 48, 48) == (0, [(32, 48)])
    wide = KernelSpec("wide", lambda a, d: None, lambda a, d: {},
                      [Tensor("x", ("M", "2*K")), Tensor("s", ("K/group",)), Tensor("m", ("M*K",)),
                       Tensor("o", ("K+8",)), Tensor("y", ("M", "K"), role="output")],
                      tiles={"M": 1, "K": 32}, loop_dim="K", constants={"group": 64})
    x, s, m, o, _ = wide.tensors
    # two copies of K side by side: the tile in each; a group of 64 shared by two K tiles of 32: kept in both
    assert wide.loop_windows(x, 32, 64, 70) == (1, [(32, 64), (102, 134)])
    assert wide.loop_windows(s, 0, 32, 128) == (0, [(0, 1)]) and wide.loop_windows(s, 32, 64, 128) == (0, [(0, 1)])
    assert wide.loop_windows(m, 0, 32, 70) is None and wide.loop_windows(o, 0, 32, 70) is None
    assert wide.loop_unmasked(m) == "'M*K' mixes K with another dimension"
    assert wide.loop_unmasked(o) == "'K+8' is not a multiple of K"
    assert wide.loop_unmasked(x) is None and wide.loop_unmasked(wide.tensors[-1]) is None


def test_tile_probe_passes_a_correct_dequant_and_masks_packed_and_grouped_inputs(pipecheck):
    seen: list[tuple[int, int]] = []

    def watching(a, d):
        # rows of w and scales that hold anything: the probed K tile's, over 8 and over the group
        seen.append((int((a["w"] != 0).any(dim=1).sum()), int((a["scales"] != 0).any(dim=1).sum())))
        _dequant(a, d)

    result = tile_probe.check_tile_probe(pipecheck, _dequant_spec(watching), Shape(K=80, N=9))
    assert result.verdict is Verdict.PASS and "3 of 3 K tiles each counted once" in result.summary
    assert seen == [(4, 2), (4, 2), (2, 1)]  # tiles of 32, 32 and the partial 16


@pytest.mark.pipecheck(expect_failures=True)
def test_tile_probe_names_a_dropped_k_tile_of_a_dequant(pipecheck):
    def drop_last(a, d):
        _dequant(a, d)
        k = (d["K"] - 1) // 32 * 32
        a["out"][k:] = 0

    with pytest.raises(PipecheckFailure, match=r"K tile 2 of 3, the last \(epilogue, partial 16/32\), never reached"):
        tile_probe.check_tile_probe(pipecheck, _dequant_spec(drop_last, "dequant_drop_last"), Shape(K=80, N=9))


def test_tile_probe_says_which_inputs_it_leaves_unmasked(pipecheck):
    def rowsum(a, d):
        a["y"].copy_(a["x"].view(d["M"], d["K"]).sum(dim=1) + a["b"].sum(dim=1))

    spec = KernelSpec("flat_rowsum", rowsum,
                      lambda a, d: {"y": a["x"].double().view(d["M"], d["K"]).sum(dim=1) + a["b"].double().sum(dim=1)},
                      [Tensor("x", ("M*K",), "float32"), Tensor("b", ("M", "K"), "float32"),
                       Tensor("y", ("M",), "float32", role="output")],
                      tiles={"M": 1, "K": 8}, loop_dim="K")
    result = tile_probe.check_tile_probe(pipecheck, spec, Shape(M=3, K=20))
    assert result.verdict is Verdict.PASS
    assert result.summary.endswith("not masked along K: 'x' ('M*K' mixes K with another dimension)")
    assert result.details["unmasked"] == {"x": "'M*K' mixes K with another dimension"}


def test_every_check_passes_a_correct_dequant(pipecheck):
    results = correctness.check_all(pipecheck, _dequant_spec(), Shape(K=48, N=9), values="negative")
    assert [r.verdict for r in results] == [Verdict.PASS] * 3


def test_the_wrapper_form_allocates_a_fused_output(pipecheck):
    def crelu(x):
        y = torch.empty((x.shape[0], 2 * x.shape[1]), dtype=x.dtype, device=x.device)
        y[:, :x.shape[1]] = x.clamp(min=0)
        y[:, x.shape[1]:] = (-x).clamp(min=0)
        return y

    spec = KernelSpec("crelu_call", call=crelu,
                      reference=lambda a, d: {"y": torch.cat([a["x"].double().clamp(min=0),
                                                              (-a["x"].double()).clamp(min=0)], 1)},
                      tensors=[Tensor("x", ("M", "N"), "float32"), Tensor("y", ("M", "2*N"), "float32", role="output")],
                      tiles={"M": 1, "N": 16}, loop_dim="N")
    result = coverage.check_coverage(pipecheck, spec, Shape(M=2, N=9))
    assert result.verdict is Verdict.PASS
    assert result.details["outputs"]["y"]["allocated"].startswith("torch.empty")


def _scale_ref(a, d):
    return {"y": a["x"].double() * a["w"].double()}


def _scale(a, d):
    a["y"].copy_((a["x"].float() * a["w"]).half())


def test_a_pattern_the_output_dtype_cannot_carry_is_skipped_with_why(pipecheck):
    """fp16 out of fp16 activations times fp32 weights under ``values=tiny``: the products (about 1e-20) are
    below fp16's smallest subnormal, so the output is zero whatever the kernel did: a skip that says so, not a
    failure blamed on masks (mamba-ssm's layer norm on a first day); ``normal`` values still compare."""
    spec = KernelSpec("scale", _scale, _scale_ref,
                      [Tensor("x", ("M", "N"), "float16"), Tensor("w", ("N",), "float32"),
                       Tensor("y", ("M", "N"), "float16", role="output")], tiles={"M": 4, "N": 16}, loop_dim="N")
    tiny = coverage.check_coverage(pipecheck, spec, Shape(M=5, N=17), values="tiny")
    assert tiny.verdict is Verdict.SKIP and "cannot be carried by float16" in tiny.summary
    assert coverage.check_coverage(pipecheck, spec, Shape(M=5, N=17)).verdict is Verdict.PASS
