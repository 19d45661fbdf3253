"""FlashAttention's tile space per head dim, the SM count it tunes for, and its ring of KV slots."""

from __future__ import annotations

import tilus
from tilus import int32, uint32

#: dynamic shared memory of a Hopper block, less room for the barriers
SMEM_BYTES = 227 * 1024 - 1024


class Ring(tilus.Class):
    """A ring of ``num_stages`` slots: ``full[s]`` completes when slot ``s`` is loaded (one
    arrival plus the bytes), ``empty[s]`` when its ``consumers`` warp groups are done with it."""

    def __init__(self, num_stages: int, consumers: int = 2):
        self.num_stages: int = num_stages
        self.full = self.mbarrier.alloc([1] * num_stages)
        self.empty = self.mbarrier.alloc([consumers] * num_stages)
        self.stage: int32 = 0
        self.phase: uint32 = 0
        self.prev_stage: int32 = 0  # the slot (and its phase) before the current one
        self.prev_phase: uint32 = 0

    def advance(self):
        """Move to the next slot, flipping the phase on wrap-around."""
        self.prev_stage = self.stage
        self.prev_phase = self.phase
        self.stage += 1
        if self.stage == self.num_stages:  # a compare and two selects (no division by 3)
            self.stage = 0
            self.phase ^= 1


def default_tiles(dim: int, causal: bool = False) -> list[tuple]:
    """(block_m, block_n, num_stages, consumers, pingpong, persistent, early_rescale, cluster)
    candidates for a head dim (registers and shared memory): ``consumers`` warp groups of
    ``block_m / consumers`` rows each, taking turns on the tensor cores when ``pingpong``;
    ``persistent``: one block per SM loops over the blocks of query rows; ``early_rescale``: O
    is rescaled while ``S = Q K^T`` runs; ``cluster`` 2: two blocks (neighbouring query rows)
    share every KV tile, each loading half of it into both (TMA multicast)); a ninth field, if
    any, holds more constructor arguments as (name, value) pairs."""
    # measured on an H200 (bench/results/2026-12-01-h200-fa-variants-b.txt, and
    # 2026-12-02-h200-fa-overlap(-b).txt for head dim 128): without ping-pong, with split producers
    # and all-thread arrivals; persistent wins at 128 but causal
    fast = (("split_producer", True), ("all_arrive", True))
    if dim <= 64:  # skip_empty: the ragged last block's empty groups run no GEMM (4096 rows in
        # blocks of 192: 1.04x cuDNN, without 0.98x; 2026-12-02-h200-r47); full_first: no spill
        # (76 bytes without), 1.04x the tile without it (2026-12-02-h200-r51-fa-probe; causal:
        # not measured)
        ff = () if causal else (("full_first", True),)
        return [
            (192, 128, 4, 3, False, False, False, 1, fast + ff),
            (192, 128, 4, 3, True, False, True, 1, fast),
            (192, 128, 4, 3, False, False, False, 1, fast + (("skip_empty", True),)),
            (128, 128, 3, 2, True, True, True, 1, fast),
        ]
    if dim <= 128 and causal:
        return [
            (128, 128, 2, 2, True, False, True, 1, fast),
            (128, 128, 3, 2, False, False, False, 1, fast),
            (128, 128, 3, 2, False, False, False, 1),
            (128, 128, 2, 2, True, True, True, 1, fast),
        ]
    if dim <= 128:  # persistent, the next tile's first S overlapped with the epilogue (early_s1,
        # its second S also with its first softmax, measured slower: 2026-12-02-h200-r47); with
        # ping-pong 1.03x cuDNN at 4096 and 8192 rows, full_first 1.01x the tile without it at
        # 1024 (2026-12-02-h200-r51-fa-probe)
        ov = fast + (("overlap", 1),)
        return [
            (128, 128, 2, 2, True, True, False, 1, ov),
            (128, 128, 2, 2, False, True, False, 1, ov + (("full_first", True),)),
            (128, 128, 2, 2, False, True, False, 1, ov),
            (128, 128, 2, 2, False, True, False, 1, fast),
        ]
    return [
        (128, 80, 2, 2, True, False, True, 1),
        (128, 64, 2, 2, True, False, False, 1),
        (128, 64, 2, 2, False, False, False, 1, fast),
        (128, 48, 3, 2, False, False, False, 1),
    ]
