"""Ampere-style asynchronous copies (``cp.async``): copy_async and its commit/wait groups."""

from __future__ import annotations

from tilus.ir import inst_memory as M
from tilus.ir.enums import TensorKind
from tilus.lang.builder import current
from tilus.lang.instructions.tiles import tile_dims


class AsyncCopyInstructions:
    """``self.copy_async`` and its groups (sm80+). Each thread of the current group issues its
    chunks of the tile; commit and wait act on the calling threads' own copies, so a tile
    filled by several threads needs a ``self.sync()`` after the wait before others read it."""

    def copy_async(self, src, dst, offsets, dims=None, evict=None, check_bounds=True):
        """Start copying the tile at ``offsets`` of global ``src`` into shared ``dst``.

        ``dims`` lists the global dims the tile spans (all by default); the tile's last dim
        must be the global innermost dim (rows move as 4/8/16-byte chunks). With
        ``check_bounds`` the part outside ``src`` reads as zero; without it the whole tile must
        be inside. ``evict``: ``"evict_normal"`` (default) or ``"evict_first"`` (an L2 hint).
        The data is there after ``copy_async_wait_group``/``copy_async_wait_all``.
        """
        b = current()
        b.expect_tensor(src, (TensorKind.GLOBAL,), "copy_async's source")
        b.expect_tensor(dst, (TensorKind.SHARED,), "copy_async's destination")
        if not isinstance(check_bounds, bool):
            raise b.error(f"check_bounds must be True or False, got {check_bounds!r}")
        offs = b.expect_offsets(offsets, src.ndim, "offsets")
        dims = tile_dims(src, dst.ndim, dims, "copy_async")
        b.inst(M.CopyAsync(src, dst, offs, dims, evict, check_bounds))

    def copy_async_commit_group(self):
        """Close the current group of copies (``cp.async.commit_group``)."""
        current().inst(M.CopyAsyncCommitGroup())

    def copy_async_wait_group(self, n: int):
        """Wait until at most ``n`` committed groups are in flight (``cp.async.wait_group``)."""
        b = current()
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise b.error(f"copy_async_wait_group needs a non-negative compile-time int, got {n!r}")
        b.inst(M.CopyAsyncWaitGroup(n))

    def copy_async_wait_all(self):
        """Wait for every copy in flight, committed or not (``cp.async.wait_all``)."""
        current().inst(M.CopyAsyncWaitAll())
