"""pipecheck on FlagGems' Triton ops (``flag-gems``), through the functions it registers for aten ops.

GPU only. Importing ``flag_gems`` queries the device (``torch.cuda.get_device_name``) and its
``libentry`` wrapper needs a compiled ``JITFunction`` (it reads ``fn.fn``), so it neither imports nor
runs under Triton's interpreter: on a machine without a CUDA GPU this module is skipped with that
reason. Install it in a clone of this repository with ``pip install -e ".[examples]"`` (FlagGems also
needs ``sqlalchemy``).

Run: ``pytest examples/flag_gems --pipecheck`` on a GPU machine.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("flag_gems needs a CUDA device: it queries the device when imported and its libentry wrapper does "
                "not run under Triton's interpreter (the CPU tier)", allow_module_level=True)
pytest.importorskip("sqlalchemy", reason="flag_gems needs sqlalchemy (pip install sqlalchemy)")
pytest.importorskip("flag_gems.ops",
                    reason="flag-gems is not installed (in a clone of pytest-pipecheck: pip install -e '.[examples]')")

from flag_gems.ops.rms_norm import rms_norm as gems_rms_norm  # noqa: E402
from flag_gems.ops.softmax import softmax as gems_softmax  # noqa: E402

from pytest_pipecheck import KernelSpec, Tensor  # noqa: E402

EPS = 1e-5


def rms_norm(x, w):
    """``aten::rms_norm`` as FlagGems implements it (BLOCK_SIZE = next_power_of_2(N) up to 4096 columns)."""
    return gems_rms_norm(x, [x.shape[-1]], w, EPS)


def rms_norm_reference(a, d):
    x = a["x"].double()
    return {"y": x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * a["w"].double()}


RMS_NORM = KernelSpec(
    "flag_gems_rms_norm", call=rms_norm, reference=rms_norm_reference,
    tensors=(Tensor("x", ("M", "N"), layout=("contiguous", "sliced")), Tensor("w", ("N",)),
             Tensor("y", ("M", "N"), role="output")),
    tiles={"M": 1, "N": 64}, loop_dim="N", description="flag_gems.ops.rms_norm.rms_norm",
)


def softmax(x):
    """``aten::_softmax(x, -1, False)`` as FlagGems implements it."""
    return gems_softmax(x, -1, False)


SOFTMAX = KernelSpec(
    "flag_gems_softmax", call=softmax, reference=lambda a, d: {"y": torch.softmax(a["x"].double(), dim=-1)},
    tensors=(Tensor("x", ("M", "N"), layout=("contiguous", "transposed")), Tensor("y", ("M", "N"), role="output")),
    tiles={"M": 1, "N": 64}, loop_dim="N", description="flag_gems.ops.softmax.softmax (inner dimension)",
)


@pytest.mark.pipecheck(spec=RMS_NORM)
def test_rms_norm(pipecheck, shape, values, layout):
    pipecheck.check_kernel(RMS_NORM, shape, values=values, layout=layout)


@pytest.mark.pipecheck(spec=SOFTMAX)
def test_softmax(pipecheck, shape, values, layout):
    pipecheck.check_kernel(SOFTMAX, shape, values=values, layout=layout)
