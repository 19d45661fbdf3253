"""The W4A16 mma kernel's memory floor: its grid, TMA ring and barriers with no dequant or math.

``MatmulWxA16MmaStream`` is ``MatmulWxA16Mma`` (``examples/quantized/matmul_wx_a16_mma.py``)
with ``products`` (the dequantization, the mma.sync products and the scaling) taken out: the
same blocks, the same weight and X copies into the same ring slots on the same mbarriers, the
same waits and the same split-K meeting, so its time is what the kernel's pipeline needs to
move the packed weights into shared memory. Its output is zero (it is not checked).
``python bench/w4a16_configs.py --kernel mma-floor --configs ...`` times it pinned beside the
real kernel's configs and cuBLAS; ``--kernel mma-scales`` the same with the scale loads kept
(``MatmulWxA16MmaScales``), which tells the scales' share of the kernel's time over the floor.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "examples" / "quantized") not in sys.path:
    sys.path.insert(0, str(REPO / "examples" / "quantized"))

from matmul_wx_a16_mma import MatmulWxA16Mma  # noqa: E402

from tilus import float32  # noqa: E402
from tilus.ir.layout.register import mma_c  # noqa: E402


class NoProducts:
    """A mixin before a ``MatmulWxA16Mma`` class: its steps only wait for their ring slot and
    free it."""

    def products(self, ws_, ss, xs, acc, rsc):
        """Nothing: the slot's words, scales and X are left unread (see the module)."""


class ScalesOnly:
    """A mixin before a ``MatmulWxA16Mma`` class: its steps wait for their ring slot, add the
    chunk's scales to the sums (so that their loads stay) and free the slot: the floor with the
    scale loads the real kernel makes."""

    def products(self, ws_, ss, xs, acc, rsc):
        """``acc += scale`` of each chunk, broadcast over the columns (see the class)."""
        nw, bm = self.warps, self.block_m
        self.annotate_layout(acc, mma_c(16 * nw, bm, nw, 1, nw))  # the real kernel's (the dot's)
        for sc in ss:
            acc += self.cast(sc, float32)


class MatmulWxA16MmaScales(ScalesOnly, MatmulWxA16Mma):
    """``MatmulWxA16Mma`` whose steps only load the scales (not the codes' math)."""


class MatmulWxA16MmaStream(NoProducts, MatmulWxA16Mma):
    """``MatmulWxA16Mma`` whose steps only wait for their ring slot and free it."""


def stream_of(kernel_cls):
    """The floor class of another version's ``MatmulWxA16Mma`` (``bench/module_ab.py
    --floor``), named after it in its module (the tuning cache keys on the name)."""
    name = f"{kernel_cls.__name__}Stream"
    return type(name, (NoProducts, kernel_cls), {"__module__": kernel_cls.__module__})
