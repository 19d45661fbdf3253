"""Hopper instruction groups: ``self.mbarrier``, ``self.tma``, ``self.wgmma``, ``self.fence``."""

from __future__ import annotations

from tilus.dtypes import bfloat16, float8_e4m3, float8_e5m2, float16, float32, int32, uint32
from tilus.ir import inst as I
from tilus.ir import inst_cluster as C
from tilus.ir import inst_prefetch as PF
from tilus.ir.enums import MemScope, MemSem, TensorKind
from tilus.ir.expr import Const, Expr
from tilus.ir.tensor import TensorVar
from tilus.lang.builder import current
from tilus.lang.instructions.cluster import ClusterMBarrier, check_multicast_mask

SEMS = tuple(MemSem)
SCOPES = tuple(MemScope)


def _check_sem(b, sem, scope, allowed) -> tuple[MemSem, MemScope]:
    """The user's ``sem``/``scope`` strings as enum members, or an error at the user's line."""
    if sem not in allowed:
        raise b.error(f"sem must be one of {', '.join(allowed)}, got {sem!r}")
    if scope not in SCOPES:
        raise b.error(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    return MemSem(sem), MemScope(scope)


def _barrier(b, barrier) -> Expr:
    e = b.expect_scalar(barrier, "the barrier")
    if isinstance(e, Const):
        raise b.error("the barrier must be an element of a tensor made by self.mbarrier.alloc")
    return e


class MBarrierGroup(ClusterMBarrier):
    """Shared-memory mbarriers (PTX ISA 9.7.13.15): alloc, arrive, expect-tx, wait (the
    cluster forms are in ``tilus.lang.instructions.cluster``)."""

    producer_initial_phase = 1
    consumer_initial_phase = 0

    def alloc(self, counts) -> TensorVar:
        """One barrier per expected-arrival count; returns a uint32 tile of their addresses."""
        b = current()
        if not isinstance(counts, (list, tuple)):
            counts = [counts]
        cs = tuple(b.expect_scalar(c, f"counts[{i}]", int32) for i, c in enumerate(counts))
        out = b.register(uint32, (len(cs),), "barriers")
        b.inst(I.MBarrierAlloc(out, cs))
        return out

    def arrive(self, barrier, count=1, sem="release", scope="cta"):
        """Every thread of the current group arrives ``count`` times on ``barrier``."""
        b = current()
        sem, scope = _check_sem(b, sem, scope, (MemSem.RELAXED, MemSem.RELEASE))
        b.inst(
            I.MBarrierArrive(
                _barrier(b, barrier), b.expect_scalar(count, "count", uint32), sem, scope
            )
        )

    def arrive_and_expect_tx(self, barrier, transaction_bytes, sem="release", scope="cta"):
        """Each thread of the group expects ``transaction_bytes`` more bytes, then arrives."""
        b = current()
        sem, scope = _check_sem(b, sem, scope, (MemSem.RELAXED, MemSem.RELEASE))
        tx = b.expect_scalar(transaction_bytes, "transaction_bytes", uint32)
        if isinstance(tx, Const) and tx.value >= (1 << 20):
            raise b.error(
                f"transaction_bytes {tx.value} exceeds the mbarrier tx-count range (2^20 - 1)"
            )
        b.inst(I.MBarrierArriveExpectTx(_barrier(b, barrier), tx, sem, scope))

    def wait(self, barrier, phase, sem="acquire", scope="cta", suspend_ns=None):
        """Block until the barrier's phase of parity ``phase`` (0/1) has completed.
        ``suspend_ns`` (a constant, 1 to 2^31 - 1): each try_wait may suspend the thread for
        about that long before it retries (default: the system's time limit); a hint for waits
        that spin long beside busy warps (CTA scope only)."""
        b = current()
        sem, scope = _check_sem(b, sem, scope, (MemSem.RELAXED, MemSem.ACQUIRE))
        if suspend_ns is not None:
            ok = isinstance(suspend_ns, int) and not isinstance(suspend_ns, bool)
            if not ok or not 0 < suspend_ns < (1 << 31):
                raise b.error(f"suspend_ns must be an int in [1, 2^31), got {suspend_ns!r}")
            if scope != MemScope.CTA:
                raise b.error("suspend_ns needs scope='cta' (a wait on the block's own barrier)")
        b.inst(
            I.MBarrierWait(
                _barrier(b, barrier),
                b.expect_scalar(phase, "phase", uint32),
                sem,
                scope,
                suspend_ns,
            )
        )


def _tma_issuer_check(b, what):
    g = b.group
    if g.size == 1 or (g.size == 32 and g.abs_begin % 32 == 0 and g.begin >= 0):
        return
    raise b.error(
        f"{what} must be issued by one thread (self.single_thread()) or one full "
        f"warp; the current thread group has {g.size} threads"
    )


def _tma_tile(b, g, s, offsets, dims, what):
    b.expect_tensor(g, (TensorKind.GLOBAL,), f"{what}'s global tensor")
    b.expect_tensor(s, (TensorKind.SHARED,), f"{what}'s shared tensor")
    if g.dtype != s.dtype:
        raise b.error(f"{what}: global tensor is {g.dtype} but the shared tile is {s.dtype}")
    offs = b.expect_offsets(offsets, g.ndim, "offsets")
    if dims is None:
        if s.ndim != g.ndim:
            raise b.error(f"{what}: a rank-{s.ndim} tile from a rank-{g.ndim} tensor needs dims=")
        dims = tuple(range(g.ndim))
    dims = tuple(dims)
    if len(dims) != s.ndim:
        raise b.error(f"{what}: dims={list(dims)} must have one entry per tile dim ({s.ndim})")
    return offs, dims  # the box limit is the instruction's own check (validate)


def _no_cache_policy(b, cache_policy, what: str) -> None:
    # an L2 cache hint (``.L2::cache_hint`` with a ``createpolicy`` operand) has no lowering yet;
    # refusing it beats silently dropping it
    if cache_policy is not None:
        raise b.error(
            f"{what}: cache_policy={cache_policy!r} is not supported (no L2 cache-hint lowering "
            f"yet); leave it None"
        )


class TmaGroup:
    """Bulk tensor copies (PTX ISA 9.7.9.25.5.2 cp.async.bulk.tensor)."""

    def global_to_shared(
        self,
        *,
        src,
        dst,
        offsets,
        dims=None,
        mbarrier,
        cta_group=1,
        multicast_mask=None,
        cache_policy=None,
    ):
        """Asynchronously copy the tile at ``offsets`` of ``src`` into ``dst``.

        Completion adds the tile's bytes to ``mbarrier``'s transaction count; the out-of-bounds
        part of the box is zero-filled. With ``multicast_mask`` (a block cluster, sm90+) the
        box lands at ``dst``'s offset in every block of the cluster whose rank is set in the
        mask, each completing the bytes on its own barrier at ``mbarrier``'s offset.
        ``cta_group=2`` (Blackwell) is refused; ``cache_policy`` (an L2 cache hint) is not
        supported yet: anything but None is refused.
        """
        b = current()
        if cta_group != 1:
            raise b.error(f"tma.global_to_shared: cta_group={cta_group!r} needs sm100; use 1")
        _no_cache_policy(b, cache_policy, "tma.global_to_shared")
        _tma_issuer_check(b, "tma.global_to_shared")
        offs, dims = _tma_tile(b, src, dst, offsets, dims, "tma.global_to_shared")
        bar = _barrier(b, mbarrier)
        if multicast_mask is None:
            b.inst(I.TmaGlobalToShared(src, dst, offs, dims, bar))
            return
        mask = check_multicast_mask(b, multicast_mask, "tma.global_to_shared")
        b.inst(C.TmaGlobalToSharedMulticast(src, dst, offs, dims, bar, mask))

    def shared_to_global(self, src, dst, offsets, dims=None, cache_policy=None):
        """Asynchronously copy shared tile ``src`` into ``dst`` at ``offsets``; ``cache_policy``
        (an L2 cache hint) is not supported yet: anything but None is refused."""
        b = current()
        _no_cache_policy(b, cache_policy, "tma.shared_to_global")
        _tma_issuer_check(b, "tma.shared_to_global")
        offs, dims = _tma_tile(b, dst, src, offsets, dims, "tma.shared_to_global")
        b.inst(I.TmaSharedToGlobal(src, dst, offs, dims))

    def prefetch(self, *, src, like, offsets, dims=None):
        """Prefetch into L2 the box of ``src`` at ``offsets`` that ``global_to_shared`` into the
        shared tile ``like`` would read (PTX ``cp.async.bulk.prefetch.tensor``): a hint with no
        barrier and no completion, issued ahead so that the later load hits in L2. ``like``
        gives the box (and the tensor map) and is neither read nor written."""
        b = current()
        _tma_issuer_check(b, "tma.prefetch")
        offs, dims = _tma_tile(b, src, like, offsets, dims, "tma.prefetch")
        b.inst(PF.TmaPrefetch(src, like, offs, dims))

    def commit_group(self):
        """Close the current group of shared -> global copies."""
        current().inst(I.TmaCommitGroup())

    def wait_group(self, n: int, read: bool = False):
        """Wait until at most ``n`` groups of shared -> global copies are pending; with
        ``read`` only until their shared sources have been read (the tiles may be reused or the
        block may exit; the global writes land later)."""
        b = current()
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise b.error(f"wait_group needs a non-negative compile-time int, got {n!r}")
        if not isinstance(read, bool):
            raise b.error(f"wait_group's read must be True or False, got {read!r}")
        b.inst(I.TmaWaitGroup(n, read))


class WgmmaGroup:
    """Warp-group MMA (PTX ISA 9.7.15 wgmma): fence, mma, commit_group, wait_group."""

    def fence(self):
        """Make prior register/shared writes visible to the following wgmma.mma."""
        self._check_group("wgmma.fence")
        current().inst(I.WgmmaFence())

    def commit_group(self):
        """Close the current group of wgmma.mma operations."""
        self._check_group("wgmma.commit_group")
        current().inst(I.WgmmaCommitGroup())

    def wait_group(self, n: int):
        """Wait until at most ``n`` wgmma groups are pending; retired results become visible."""
        b = current()
        self._check_group("wgmma.wait_group")
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 7:
            raise b.error(f"wgmma.wait_group needs a compile-time int in [0, 7], got {n!r}")
        b.inst(I.WgmmaWaitGroup(n))

    def mma(self, a, b_, d):
        """``d += a @ b`` on the tensor cores: b [K, N] in shared memory, a [M, K] in shared
        memory or in registers (a register tile of the warp group: the A fragment of
        wgmma.mma_async, laid out like a wgmma accumulator of shape [M, K]; a float16/bfloat16
        cast of an accumulator of the same shape feeds it with no data movement). A register A
        must not be written while the wgmma is in flight (until the wgmma.wait_group that
        retires it), and a write to it needs a wgmma.fence before the next mma reads it."""
        b = current()
        self._check_group("wgmma.mma")
        b.expect_tensor(a, (TensorKind.SHARED, TensorKind.REGISTER), "wgmma.mma operand a")
        b.expect_tensor(b_, (TensorKind.SHARED,), "wgmma.mma operand b")
        b.expect_tensor(d, (TensorKind.REGISTER,), "wgmma.mma accumulator d")
        for t, n in ((a, "a"), (b_, "b"), (d, "d")):
            if t.ndim != 2:
                raise b.error(f"wgmma.mma operand {n} must be 2-D, got {t.type_str()}")
        (m, k), (k2, n), (m2, n2) = a.shape, b_.shape, d.shape
        if k != k2 or m != m2 or n != n2:
            raise b.error(
                f"wgmma.mma shapes do not match: a [{m}, {k}] @ b [{k2}, {n}] into d [{m2}, {n2}]"
            )
        fp8 = (float8_e4m3, float8_e5m2)
        if not (
            (a.dtype == b_.dtype and a.dtype in (float16, bfloat16))
            or (a.dtype in fp8 and b_.dtype in fp8)
        ):
            raise b.error(
                f"wgmma.mma supports float16/bfloat16 operands of one dtype or float8_e4m3/"
                f"float8_e5m2 operands in any mix, got {a.dtype} and {b_.dtype}"
            )
        if d.dtype != float32:
            raise b.error(f"wgmma.mma accumulates in float32, got a {d.dtype} accumulator")
        if a.dtype in fp8 or b_.dtype in fp8:
            if a.kind == TensorKind.REGISTER:
                raise b.error(
                    f"wgmma.mma with a register A operand supports float16/bfloat16, got "
                    f"{a.dtype}; keep an fp8 A in shared memory"
                )
            self._check_k_major(a, b_)
        if m % 64:
            raise b.error(f"wgmma.mma: M={m} must be a multiple of 64 (instruction shape m64)")
        kstep = 32 if a.dtype in fp8 else 16  # one instruction covers 32 bytes of K
        if k % kstep:
            raise b.error(f"wgmma.mma: K={k} must be a multiple of {kstep} for {a.dtype}")
        if n % 8:
            raise b.error(f"wgmma.mma: N={n} must be a multiple of 8")
        if a is d:
            raise b.error("wgmma.mma: the accumulator cannot also be the A operand")
        b.inst(I.WgmmaMma(a, b_, d))

    @staticmethod
    def _check_k_major(a, b_):
        """8-bit operands have no transpose in the ISA: A must be stored [M, K] and B [N, K]
        (passed as its ``.transpose()``), K contiguous in both."""
        b = current()
        a_t = b.permuted.get(a, (None, None))[1] == (1, 0)
        b_t = b.permuted.get(b_, (None, None))[1] == (1, 0)
        if a_t:
            raise b.error(
                f"wgmma.mma operand a `{a.name}` ({a.dtype}) is MN-major (a transposed view, M "
                "contiguous): the ISA has no transpose for 8-bit operands; store a as [M, K] "
                "with K contiguous"
            )
        if not b_t:
            raise b.error(
                f"wgmma.mma operand b `{b_.name}` ({b_.dtype}) is MN-major (a [K, N] tile, N "
                "contiguous): the ISA has no transpose for 8-bit operands; store b as [N, K] "
                "and pass its .transpose()"
            )

    @staticmethod
    def _check_group(what):
        b = current()
        g = b.group
        if g.size != 128 or g.begin < 0 or g.abs_begin % 128:
            span = (
                f"threads [{g.abs_begin}, {g.abs_begin + g.size})"
                if g.begin >= 0
                else "a single elected thread"
            )
            raise b.error(
                f"{what} needs a warp group: exactly 128 threads starting at a "
                f"multiple of 128; the current thread group is {span}"
            )


class FenceGroup:
    """Proxy fences (PTX ISA 9.7.13.4 membar/fence)."""

    def proxy_async(self, space: str = "shared"):
        """Order generic-proxy accesses of ``space`` ("shared": the block's shared memory, or
        "global") against async-proxy (TMA, WGMMA) accesses, both ways
        (``fence.proxy.async.shared::cta`` / ``fence.proxy.async.global``)."""
        current().inst(I.FenceProxyAsync(space))

    def proxy_async_release(self):
        """Make prior generic-proxy writes to shared memory visible to later async-proxy reads
        (lowered to the bidirectional shared fence, which orders at least as much)."""
        current().inst(I.FenceProxyAsync("shared"))


class HopperInstructions:
    """Adds ``self.mbarrier``, ``self.tma``, ``self.wgmma``, ``self.fence`` and
    ``self.setmaxnreg``."""

    mbarrier = MBarrierGroup()
    tma = TmaGroup()
    wgmma = WgmmaGroup()
    fence = FenceGroup()

    def setmaxnreg(self, count: int):
        """Give the current warp groups ``count`` registers per thread from here on (PTX
        ``setmaxnreg``; sm90+). A warp-specialized kernel lowers its producer's count and raises
        its consumers' so that their accumulators fit: with 3 warp groups each thread starts
        with at most 168 registers; a producer at 40 leaves two consumers 232 each.

        ``count`` is a compile-time multiple of 8 in [24, 256]; the current group must be whole
        warp groups (``warp_group(4 * i, 4 * n)``) and the block a whole number of warp groups.
        Whether the count is raised or lowered follows from the count the block starts with;
        the compiler refuses requests whose sum over the block's warp groups exceeds the 64K
        registers of an SM (the raise would wait forever) and, after ptxas, a lowering to more
        registers than ptxas gave the kernel.
        """
        b = current()
        if isinstance(count, bool) or not isinstance(count, int) or not 24 <= count <= 256:
            raise b.error(f"setmaxnreg needs a compile-time int in [24, 256], got {count!r}")
        if count % 8:
            raise b.error(f"setmaxnreg needs a multiple of 8, got {count}")
        g = b.group
        if g.begin < 0 or g.abs_begin % 128 or g.size % 128:
            raise b.error(
                "setmaxnreg must run on whole warp groups (threads [128 * i, 128 * (i + n))); "
                f"the current thread group has {g.size} threads from thread {g.abs_begin}"
            )
        b.inst(I.SetMaxNReg(count))
