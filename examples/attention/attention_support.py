"""What the attention examples share: argument checks, inputs, the float32 reference, checking."""

from __future__ import annotations

import math

import numpy as np

from tilus.errors import TilusArgumentError

DTYPES = ("float16", "bfloat16")


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


def dtype_name(x) -> str:
    """``"float16"``/``"bfloat16"``/... of a NumPy array or a torch tensor."""
    if _is_torch(x):
        return str(x.dtype).removeprefix("torch.")
    return np.dtype(x.dtype).name


def _contiguous(x) -> bool:
    return x.is_contiguous() if _is_torch(x) else bool(x.flags.c_contiguous)


def _tensor(name: str, x, ndim: int, dtype: str | None = None):
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise TilusArgumentError(f"{name} must be a tensor, got {type(x).__name__}")
    if len(x.shape) != ndim:
        raise TilusArgumentError(f"{name} must be {ndim}-D, got shape {list(x.shape)}")
    if dtype is not None and dtype_name(x) != dtype:
        raise TilusArgumentError(f"{name} must be {dtype}, got {dtype_name(x)}")
    if not _contiguous(x):
        raise TilusArgumentError(
            f"{name} must be contiguous (row-major {list(x.shape)}); got strides "
            f"{list(x.stride()) if _is_torch(x) else list(x.strides)}: pass {name}.contiguous()"
        )


def tensor_arg(name: str, x, ndim: int, dtype: str | None = None) -> None:
    """Refuse, naming ``name``, anything but a contiguous ``ndim``-D tensor (of ``dtype``)."""
    _tensor(name, x, ndim, dtype)


def check_attention_args(q, k, v) -> tuple[int, int, int, int, int, int, str]:
    """Check q [b, h, sq, d], k and v [b, hkv, skv, d]; return (b, h, hkv, sq, skv, d, dtype)."""
    _tensor("q", q, 4)
    dt = dtype_name(q)
    if dt not in DTYPES:
        raise TilusArgumentError(f"q must be float16 or bfloat16, got {dt}")
    _tensor("k", k, 4, dt)
    _tensor("v", v, 4, dt)
    b, h, sq, d = q.shape
    if tuple(k.shape) != tuple(v.shape):
        raise TilusArgumentError(f"k {list(k.shape)} and v {list(v.shape)} must have one shape")
    bk, hkv, skv, dk = k.shape
    if bk != b:
        raise TilusArgumentError(f"k has batch {bk}, q has batch {b}")
    if dk != d:
        raise TilusArgumentError(f"k has head dim {dk}, q has head dim {d}: they must match")
    if d not in (64, 128, 256):
        raise TilusArgumentError(f"q: head dim {d} is not supported (64, 128 or 256)")
    if hkv < 1 or h % hkv:
        raise TilusArgumentError(
            f"k: heads_kv = {hkv} must divide the {h} query heads (grouped-query attention)"
        )
    if sq < 1 or skv < 1:
        raise TilusArgumentError(f"empty sequence: q has {sq} rows, k has {skv}")
    return b, h, hkv, sq, skv, d, dt


def default_scale(d: int, scale) -> float:
    """The softmax scale: ``1 / sqrt(d)`` unless given."""
    return 1.0 / math.sqrt(d) if scale is None else float(scale)


def reference(q, k, v, causal: bool, scale: float):
    """(O, LSE) in float64 NumPy from NumPy or torch inputs (GQA by repeating KV heads)."""
    q, k, v = (to_f64(x) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
    if causal:
        sq, skv = s.shape[-2:]
        s = np.where(np.arange(skv)[None, :] > np.arange(sq)[:, None], -np.inf, s)
    mx = s.max(axis=-1, keepdims=True)
    e = np.exp(s - mx)
    total = e.sum(axis=-1, keepdims=True)
    return np.einsum("bhqk,bhkd->bhqd", e / total, v), (mx + np.log(total))[..., 0]


def reference_decode(q, k, v, lens, scale: float):
    """(O, LSE) in float64 of each sequence's queries against its first ``lens[b]`` keys."""
    outs, lses = [], []
    for i, n in enumerate(lens):
        o, lse = reference(q[i : i + 1], k[i : i + 1, :, :n], v[i : i + 1, :, :n], False, scale)
        outs.append(o)
        lses.append(lse)
    return np.concatenate(outs), np.concatenate(lses)


def to_f64(x) -> np.ndarray:
    """A NumPy float64 copy of an array or tensor (bf16 included)."""
    if _is_torch(x):
        return x.detach().float().cpu().numpy().astype(np.float64)
    return np.asarray(x, dtype=np.float64)


def max_error(got, want) -> float:
    """``max |got - want| / max |want|``; NaN when ``got`` holds a NaN."""
    g = to_f64(got)
    if np.isnan(g).any():
        return float("nan")
    return float(np.max(np.abs(g - want))) / max(float(np.max(np.abs(want))), 1e-30)


def report_decode(label: str, o, lse, ro, rl) -> bool:
    """Print a decode example's errors (o against ``ro``, lse against ``rl``) after ``label``;
    True when both are within the examples' tolerances."""
    err, lerr = max_error(o, ro), max_error(lse, rl)
    ok = err < 2e-2 and lerr < 1e-3
    print(f"{label}: max err {err:.2e}, lse err {lerr:.2e} {'ok' if ok else 'FAIL'}")
    return ok


def random_qkv(torch, b, h, hkv, sq, skv, d, dtype: str, device="cpu", seed=None):
    """Fresh q, k, v (standard normal) as torch tensors on ``device`` (the interpreter takes CPU
    tensors, bf16 included)."""
    gen = "cuda" if str(device).startswith("cuda") else "cpu"  # large caches: drawn on the GPU
    g = torch.Generator(gen).manual_seed(int(np.random.default_rng(seed).integers(2**31)))
    shapes = [(b, h, sq, d), (b, hkv, skv, d), (b, hkv, skv, d)]
    tdt = getattr(torch, dtype)
    return [torch.randn(s, generator=g, device=gen).to(device=device, dtype=tdt) for s in shapes]


# --- paged KV caches: [num_pages, heads_kv, page_size, dim] pools and int32 block tables -------


def gather_pages(cache, table, n: int) -> np.ndarray:
    """The first ``n`` positions of one sequence, ``[heads_kv, n, dim]`` in float64, from the
    page pool ``cache`` and the sequence's block-table row ``table``."""
    c, t = to_f64(cache), np.asarray(to_f64(table), dtype=np.int64)
    ps = c.shape[2]
    pages = c[t[: -(-n // ps)]]  # [used pages, hkv, ps, d]
    return pages.transpose(1, 0, 2, 3).reshape(c.shape[1], -1, c.shape[3])[:, :n]


def paged_reference(q, k_cache, v_cache, block_table, lens, scale: float):
    """(O, LSE) in float64 of each sequence against its pages, gathered into a contiguous cache."""
    outs, lses = [], []
    for i, n in enumerate(lens):
        k = gather_pages(k_cache, block_table[i], int(n))[None]
        v = gather_pages(v_cache, block_table[i], int(n))[None]
        o, lse = reference(to_f64(q[i : i + 1]), k, v, False, scale)
        outs.append(o)
        lses.append(lse)
    return np.concatenate(outs), np.concatenate(lses)


def paginate(torch, k, v, page_size: int, seed=None, spare: int = 1):
    """A contiguous cache k, v [b, hkv, n, d] (n a multiple of ``page_size``) as shuffled pages:
    (k_cache, v_cache [num_pages, hkv, page_size, d], block_table int32 [b, n / page_size])
    with ``spare`` unused pages in the pool."""
    b, hkv, n, d = k.shape
    per = n // page_size
    g = torch.Generator().manual_seed(int(np.random.default_rng(seed).integers(2**31)))
    perm = torch.randperm(b * per + spare, generator=g)[: b * per].to(k.device)
    table = perm.view(b, per).to(torch.int32)
    pools = []
    for x in (k, v):
        pool = torch.zeros((b * per + spare, hkv, page_size, d), dtype=x.dtype, device=x.device)
        pool[perm] = (
            x.view(b, hkv, per, page_size, d).transpose(1, 2).reshape(-1, hkv, page_size, d)
        )
        pools.append(pool)
    return pools[0], pools[1], table


def random_paged(torch, b, h, hkv, nq, lens, page_size, d, dtype: str, device="cpu", seed=None):
    """Fresh q [b, h, nq, d] and a shuffled page pool for sequences of ``lens``: (q, k_cache,
    v_cache, block_table). Each row of the table has one slot more than its longest sequence
    needs, and slots a sequence does not use hold -7 (never read)."""
    g = torch.Generator().manual_seed(int(np.random.default_rng(seed).integers(2**31)))
    used = [-(-int(n) // page_size) for n in lens]
    num_pages = sum(used) + 2  # two pages nobody uses
    perm = torch.randperm(num_pages, generator=g).tolist()
    table = torch.full((b, max(used) + 1), -7, dtype=torch.int32)
    at = 0
    for i, u in enumerate(used):
        table[i, :u] = torch.tensor(perm[at : at + u], dtype=torch.int32)
        at += u
    tdt = getattr(torch, dtype)
    q = torch.randn((b, h, nq, d), generator=g).to(device=device, dtype=tdt)
    kc, vc = (
        torch.randn((num_pages, hkv, page_size, d), generator=g).to(device=device, dtype=tdt)
        for _ in "kv"
    )
    return q, kc, vc, table.to(device)
