"""The L2 flushes the benchmarks run before each timed call: ``dirty`` and ``clean``."""

#: the protocols of the benchmarks' ``--flush``
FLUSHES = ("dirty", "clean")
FLUSH_BYTES = 256 << 20


class CleanFlush:
    """A flush whose ``zero_()`` (what the benchmarks' ``time_ms`` calls before each timed run)
    writes ``nbytes``, then reads another ``nbytes`` in place: the dirty lines of the write are
    written back during the read, outside the timed span, and the L2 holds clean lines only.

    The read is an int64 ``max``: a reduction in the tensor's own dtype reads it where it lies
    (an int32 ``sum`` first writes an int64 copy, which leaves the L2 dirty again)."""

    def __init__(self, torch, nbytes: int = FLUSH_BYTES):
        self.buf = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        self.other = torch.ones(nbytes // 8, dtype=torch.int64, device="cuda")

    def zero_(self):
        self.buf.zero_()
        self.other.max()


def make_flush(torch, protocol: str = "dirty", nbytes: int = FLUSH_BYTES):
    """The object ``time_ms`` flushes the L2 with: a tensor of ``nbytes`` (``dirty``: its
    ``zero_`` leaves the L2 full of dirty lines, which the timed kernel then writes back) or a
    :class:`CleanFlush` (``clean``)."""
    if protocol not in FLUSHES:
        raise SystemExit(f"--flush must be one of {FLUSHES}, got {protocol!r}")
    if protocol == "clean":
        return CleanFlush(torch, nbytes)
    return torch.empty(nbytes, dtype=torch.uint8, device="cuda")
