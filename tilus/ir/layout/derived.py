"""Register layouts derived from others: reductions, broadcast operands, squeeze/unsqueeze."""

# A reduction over dim d leaves each thread the elements it held with d collapsed: the thread
# digits along d become replication digits (every thread that held part of a row holds the
# row's result) and the register digits along d disappear. A broadcast operand of a binary op
# gets the full tile's layout with its broadcast dims collapsed the same way, so register i of
# the result reads a register of the operand that the same thread holds: no data moves.

from __future__ import annotations

from tilus.ir.layout.register import Factor, RegisterLayout


def _kind(threads, base: str) -> str:
    return "replicated" if all(f.dim == -1 for f in threads) else base


def collapse(layout: RegisterLayout, dims) -> RegisterLayout:
    """``layout`` with every dim in ``dims`` reduced to size 1 (replicated over the threads
    that spanned it; its register digits dropped)."""
    dims = set(dims)
    if not dims:
        return layout
    threads = tuple(Factor(-1, f.extent, 0) if f.dim in dims else f for f in layout.threads)
    locs = tuple(f for f in layout.locals if f.dim not in dims)
    if not locs:
        locs = (Factor(-1, 1, 0),)
    shape = tuple(1 if d in dims else n for d, n in enumerate(layout.shape))
    base = "reduced" if layout.kind != "replicated" else "replicated"
    return RegisterLayout(shape, threads, locs, _kind(threads, base))


def drop_dims(layout: RegisterLayout, dims) -> RegisterLayout:
    """``layout`` without the size-1 dims ``dims`` (no factor may span them)."""
    dims = sorted(set(dims))
    for d in dims:
        if layout.shape[d] != 1:
            raise ValueError(f"dim {d} of {layout.shape} is not of size 1")

    def f(x: Factor) -> Factor:
        if x.dim in dims:
            return Factor(-1, x.extent, 0)
        if x.dim < 0:
            return x
        return Factor(x.dim - sum(1 for d in dims if d < x.dim), x.extent, x.stride)

    return _renumbered(layout, [n for d, n in enumerate(layout.shape) if d not in dims], f)


def insert_dims(layout: RegisterLayout, shape) -> RegisterLayout | None:
    """``layout`` seen with size-1 dims inserted or removed so that it has ``shape`` (the
    dims of size > 1 stay in order); None when ``shape`` is not such a reshape."""
    old = [d for d, n in enumerate(layout.shape) if n != 1]
    new = [d for d, n in enumerate(shape) if n != 1]
    if [layout.shape[d] for d in old] != [shape[d] for d in new]:
        return None
    where = dict(zip(old, new))

    def f(x: Factor) -> Factor:
        if x.dim < 0 or x.dim not in where:
            return Factor(-1, x.extent, 0) if x.extent > 1 or x.dim >= 0 else x
        return Factor(where[x.dim], x.extent, x.stride)

    return _renumbered(layout, shape, f)


def _renumbered(layout, shape, f) -> RegisterLayout:
    threads = tuple(map(f, layout.threads))
    locs = tuple(x for x in map(f, layout.locals) if x.dim >= 0 or x.extent > 1)
    if not locs:
        locs = (Factor(-1, 1, 0),)
    kind = layout.kind if layout.kind in ("replicated", "reduced", "blocked") else "reduced"
    return RegisterLayout(tuple(shape), threads, locs, _kind(threads, kind))


def reduce_layout(layout: RegisterLayout, dim: int, keepdim: bool) -> RegisterLayout:
    """The layout of ``reduce(x, dim, keepdim)`` for ``x`` in ``layout``."""
    out = collapse(layout, [dim])
    return out if keepdim else drop_dims(out, [dim])


def broadcast_layout(layout: RegisterLayout, shape) -> RegisterLayout:
    """The layout an operand of ``shape`` needs to broadcast against a tile in ``layout``
    (NumPy rules: missing leading dims and size-1 dims are broadcast)."""
    shape = tuple(shape)
    lead = len(layout.shape) - len(shape)
    dims = [d for d, n in enumerate(layout.shape) if d < lead or (shape[d - lead] == 1 and n != 1)]
    out = collapse(layout, dims)
    return drop_dims(out, range(lead)) if lead else out


def broadcast_map(out: RegisterLayout, op: RegisterLayout, num_threads: int) -> list | None:
    """For each register of ``out``, the register of ``op`` (an operand broadcast to ``out``'s
    shape) the same thread holds the matching element in; None when some element of the
    operand is not in the thread that needs it (a layout conversion would be needed)."""
    lead = len(out.shape) - len(op.shape)

    def bcast(c):
        return tuple(0 if n == 1 else x for x, n in zip(c[lead:], op.shape))

    if not op.replicated and op.num_threads != out.num_threads:
        return None
    for t in range(num_threads):
        mine = op.thread_coords(t) if not op.replicated else (0,) * len(op.shape)
        if bcast(out.thread_coords(t)) != mine:
            return None
    where = {}
    for j in range(op.local_size):
        where.setdefault(op.local_coords(j), j)
    try:
        return [where[bcast(out.local_coords(i))] for i in range(out.local_size)]
    except KeyError:
        return None


def view_layout(lo, src_bits: int, dst_bits: int, shape):
    """The layout of ``view`` of a tile in ``lo``: the same threads, the row's registers
    rescaled by ``src_bits / dst_bits`` (each thread keeps its bits in register order); None
    when the thread's registers along the last dim are not a run of consecutive elements
    that splits into whole ``dst_bits`` elements."""
    last = len(lo.shape) - 1
    locs = list(lo.locals)
    if locs and locs[-1].dim == last and locs[-1].stride == 1:
        inner = locs.pop()
    else:
        inner = Factor(last, 1, 1)
    if inner.extent * src_bits % dst_bits:
        return None
    ext = inner.extent * src_bits // dst_bits

    def scaled(f):
        if f.dim != last:
            return f
        if f.stride * src_bits % dst_bits or f.stride % inner.extent:
            return None
        return Factor(last, f.extent, f.stride * src_bits // dst_bits)

    threads = [scaled(f) for f in lo.threads]
    outer = [scaled(f) for f in locs]
    if any(f is None for f in threads + outer):
        return None
    new = [*outer, Factor(last, ext, 1)] if ext > 1 or not outer else outer
    out = RegisterLayout(tuple(shape), tuple(threads), tuple(new), lo.kind)
    return out if out.local_size * dst_bits == lo.local_size * src_bits else None
