"""The GPU checks of the attention tests: a torch float32 reference and one checked run."""

from __future__ import annotations


def gpu_reference(torch, q, k, v, causal, scale):
    """(O, LSE) in torch float32 on the inputs' device (KV heads repeated for GQA)."""
    g = q.shape[1] // k.shape[1]
    k, v = (x.float().repeat_interleave(g, dim=1) for x in (k, v))
    s = torch.einsum("bhqd,bhkd->bhqk", q.float(), k) * scale
    if causal:
        mask = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1)
        s = s.masked_fill(mask, float("-inf"))
    return torch.einsum("bhqk,bhkd->bhqd", s.softmax(-1), v), torch.logsumexp(s, -1)


def check_forward(torch, forward, q, k, v, causal, kernel, ref, what=""):
    """Run ``forward`` (``flash_attention``) with ``kernel`` into a NaN-poisoned O and compare
    O and the LSE with ``ref`` (from ``gpu_reference``); ``what`` prefixes the messages."""
    ro, rl = ref
    o = torch.full_like(q, float("nan"))
    o, lse = forward(q, k, v, causal=causal, kernel=kernel, out=o)
    torch.cuda.synchronize()
    assert not o.isnan().any(), f"{what}NaN left in O"
    err = ((o.float() - ro).abs().max() / ro.abs().max()).item()
    assert err < 2e-2, f"{what}max error {err}"
    assert torch.allclose(lse, rl, atol=1e-3, rtol=1e-3), f"{what}lse"
