"""pipecheck on flash-linear-attention's (``fla-core``) Triton utility ops, through their entry points.

``call=`` is the function the library's models call (``chunk_local_cumsum``, ``chunk_global_cumsum``,
``logsumexp_fwd``, ``l2norm``): each checks its input, allocates its output with ``torch.empty_like``
/ ``new_empty`` (intercepted, poisoned, guard-banded by pipecheck) and launches an autotuned kernel.
Nothing of fla is copied here; install it in a clone of this repository with
``pip install -e ".[examples]"`` (fla-core also needs ``einops``). On a machine without a GPU the
kernels run in Triton's interpreter; the examples' conftest runs every autotune config once there
instead of timing it.

Run: ``pytest examples/fla --pipecheck``
"""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("einops", reason="fla-core needs einops (pip install einops)")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # "Triton is not supported on current platform, roll back to CPU"
    pytest.importorskip("fla.ops",
                        reason="fla-core is not installed (in a clone of pytest-pipecheck: pip install -e '.[examples]')")
    from fla.modules.norm.l2norm import l2norm
    from fla.ops.utils.cumsum import chunk_global_cumsum, chunk_local_cumsum
    from fla.ops.utils.logsumexp import logsumexp_fwd

from pytest_pipecheck import KernelSpec, Tensor  # noqa: E402

CHUNK = 16  # chunk_size of chunk_local_cumsum: one program per chunk of T
GLOBAL_BT = 32  # the first config of chunk_global_cumsum's autotune list (the one kept on the CPU tier)


# ----------------------------------------------------------------------------- chunked cumulative sums


def local_cumsum(g):
    return chunk_local_cumsum(g, CHUNK)


def local_cumsum_reference(a, d):
    g = a["g"].double()
    return {"o": torch.cat([c.cumsum(1) for c in g.split(CHUNK, dim=1)], dim=1)}


def fp32_running_sum(x, chunk=None):
    """A same-precision cumulative sum along dim 1: one fp32 addition per step, restarting every ``chunk``.

    Not ``torch.cumsum``: on the CPU it accumulates float32 in double, so its error is not an fp32 sum's.
    """
    x = x.float()
    out = torch.empty_like(x)
    acc = torch.zeros_like(x[:, 0])
    for t in range(x.shape[1]):
        acc = (x[:, t] if chunk and t % chunk == 0 else acc + x[:, t])
        out[:, t] = acc
    return out


def local_cumsum_fp32(a, d):
    return {"o": fp32_running_sum(a["g"], CHUNK)}


# A running sum's rounding error scales with the terms, not with the result: where the terms of the
# ``large`` pattern cancel, a correct fp32 sum is off by more than a relative tolerance on the result
# allows. The calibrated tolerance compares the kernel's error with an fp32 running sum instead.
LOCAL_CUMSUM = KernelSpec(
    "fla_chunk_local_cumsum", call=local_cumsum, reference=local_cumsum_reference, same_precision=local_cumsum_fp32,
    tensors=(Tensor("g", ("B", "T", "H"), dtype="float32"), Tensor("o", ("B", "T", "H"), dtype="float32", role="output")),
    tiles={"T": CHUNK}, loop_dim="T", description="fla.ops.utils.cumsum.chunk_local_cumsum (scalar, [B, T, H])",
)

GLOBAL_CUMSUM = KernelSpec(
    "fla_chunk_global_cumsum", call=chunk_global_cumsum,
    reference=lambda a, d: {"o": a["s"].double().cumsum(1)},
    tensors=(Tensor("s", ("B", "T", "H"), dtype="float32"), Tensor("o", ("B", "T", "H"), dtype="float32", role="output")),
    # the kernel walks T in chunks of BT carrying the running sum: T is a real pipelined loop here
    tiles={"T": GLOBAL_BT}, loop_dim="T", description="fla.ops.utils.cumsum.chunk_global_cumsum (scalar, [B, T, H])",
    same_precision=lambda a, d: {"o": fp32_running_sum(a["s"])},  # calibrated, as for the local cumsum
)


# ----------------------------------------------------------------------------- reductions over a row


LOGSUMEXP = KernelSpec(
    "fla_logsumexp", call=logsumexp_fwd, reference=lambda a, d: {"z": torch.logsumexp(a["x"].double(), dim=-1)},
    tensors=(Tensor("x", ("N", "D"), dtype="float32"), Tensor("z", ("N",), dtype="float32", role="output")),
    tiles={"N": 1, "D": 64}, loop_dim="D", description="fla.ops.utils.logsumexp.logsumexp_fwd",
)


def l2norm_reference(a, d):
    x = a["x"].double()
    return {"y": x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)}


L2NORM = KernelSpec(
    "fla_l2norm", call=l2norm, reference=l2norm_reference,
    tensors=(Tensor("x", ("T", "D"), layout=("contiguous", "transposed")), Tensor("y", ("T", "D"), role="output")),
    tiles={"T": 16, "D": 64}, loop_dim="D", description="fla.modules.norm.l2norm.l2norm",
)


# ----------------------------------------------------------------------------- the tests


@pytest.mark.pipecheck(spec=LOCAL_CUMSUM)
def test_chunk_local_cumsum(pipecheck, shape, values):
    pipecheck.check_kernel(LOCAL_CUMSUM, shape, values=values)


@pytest.mark.pipecheck(spec=GLOBAL_CUMSUM)
def test_chunk_global_cumsum(pipecheck, shape, values):
    pipecheck.check_kernel(GLOBAL_CUMSUM, shape, values=values)


@pytest.mark.pipecheck(spec=LOGSUMEXP)
def test_logsumexp(pipecheck, shape, values):
    pipecheck.check_kernel(LOGSUMEXP, shape, values=values)


@pytest.mark.pipecheck(spec=L2NORM)
def test_l2norm(pipecheck, shape, values, layout):
    pipecheck.check_kernel(L2NORM, shape, values=values, layout=layout)
