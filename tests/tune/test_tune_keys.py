"""Tuning buckets, device fingerprints and dispatch keys."""

import pytest

import tilus
from tilus.dtypes import float32, int32, int64
from tilus.tune import (
    device_fingerprint,
    dispatch_key,
    fingerprint_matches,
    script_file_name,
    tuning_bucket,
    tuning_ints,
)

FP = {"device": "cpu-interpreter", "torch": None, "tilus": "0.1.0"}
SPACE = [{"block": 64}, {"block": 128}, {"block": 256}]


@pytest.mark.parametrize(
    "v, bucket",
    [
        (4096, 4096),
        (5000, 6144),
        (10240, 12288),
        (14336, 16384),
        (0, 0),
        (1, 1),
        (2, 2),
        (3, 3),
        (4, 4),
        (5, 6),
        (4097, 6144),
        (6144, 6144),
        (6145, 8192),
        (-5000, -6144),
    ],
)
def test_tuning_bucket(v, bucket):
    assert tuning_bucket(v) == bucket


def test_bucket_is_idempotent_and_monotone():
    prev = 0
    for v in range(0, 5000):
        b = tuning_bucket(v)
        assert b >= v and tuning_bucket(b) == b and b >= prev
        prev = b


def test_fingerprint_without_gpu():
    fp = device_fingerprint(interpreter=True)
    assert fp["device"] == "cpu-interpreter"
    assert "tilus" in fp and "torch" in fp
    assert device_fingerprint(interpreter=True) == fp


def test_fingerprint_matching():
    assert fingerprint_matches(FP, dict(FP))
    assert not fingerprint_matches(FP, {**FP, "tilus": "0.2.0"})
    assert fingerprint_matches({**FP, "tilus": "*"}, {**FP, "tilus": "0.2.0"})
    assert fingerprint_matches("*", FP)
    assert not fingerprint_matches(None, FP)


def key(const=None, space=SPACE, ints=None, fp=FP, script="m.VecAdd()"):
    return dispatch_key(script, const or {"k": 3}, space, ints or {"n": 5000}, fp)


def test_dispatch_key_is_stable():
    k = key()
    assert k == key()
    assert len(k) == 32 and int(k, 16) >= 0
    # dict order and config order do not matter
    assert key(const={"k": 3}) == dispatch_key("m.VecAdd()", {"k": 3}, SPACE[::-1], {"n": 5000}, FP)
    # a known value: the key is a pure function of its inputs (no process-dependent hashing)
    assert key() == dispatch_key("m.VecAdd()", {"k": 3}, list(SPACE), {"n": 5000}, dict(FP))


def test_dispatch_key_sensitivity():
    base = key()
    assert key(ints={"n": 6000}) == base  # same bucket (6144)
    assert key(ints={"n": 4097 + 1024}) == base  # 5121 -> 6144
    assert key(ints={"n": 6145}) != base  # next bucket
    assert key(const={"k": 4}) != base
    assert key(fp={**FP, "device": "NVIDIA H200"}) != base
    assert key(space=SPACE[:2]) != base
    assert key(script="m.VecAdd(1)") != base


def test_tuning_ints_and_file_names():
    runtime = [("n", int32, 7), ("m", int64, 9), ("x", float32, 1.5), ("p", ~float32, object())]
    assert tuning_ints(runtime) == {"n": 7, "m": 9}
    assert script_file_name("MatmulWGMMAV5") == "matmul_wgmmav5"
    assert script_file_name("VecAdd") == "vec_add"
    assert script_file_name("a/b c") == "a_b_c"


def test_a_clean_flush_tuning_protocol_is_its_own_key():
    # a winner timed after a clean L2 flush is another decision than one timed after a dirty
    # flush; the default protocol leaves existing keys as they were
    base = key()
    with tilus.option.scoped(tune_flush="clean"):
        assert key() != base
    assert key() == base


def test_tune_flush_refuses_an_unknown_protocol(monkeypatch):
    from tilus.tune.timing import flush_protocol

    with pytest.raises(ValueError, match="tune_flush must be one of"):
        tilus.option.tune_flush("rotate")
    monkeypatch.setenv("TILUS_TUNE_FLUSH", "wash")
    with pytest.raises(ValueError, match="TILUS_TUNE_FLUSH"):
        flush_protocol()
    monkeypatch.setenv("TILUS_TUNE_FLUSH", "clean")
    assert flush_protocol() == "clean"


def test_clean_flush_writes_then_reads_another_buffer(monkeypatch):
    from tilus.tune import timing

    calls = []

    class Buf:
        def __init__(self, name):
            self.name = name

        def zero_(self):
            calls.append(("write", self.name))

        def max(self):
            calls.append(("read", self.name))

    class FakeTorch:
        int32, int64 = "int32", "int64"

        class cuda:  # noqa: N801 - the attribute torch has
            @staticmethod
            def current_device():
                return 99

        @staticmethod
        def empty(n, dtype, device):
            return Buf("written")

        @staticmethod
        def ones(n, dtype, device):
            return Buf("read")

    monkeypatch.setattr(timing, "_flush_buffers", {})
    timing.l2_flush(FakeTorch, "clean")()
    timing.l2_flush(FakeTorch, "dirty")()
    assert calls == [("write", "written"), ("read", "read"), ("write", "written")]
