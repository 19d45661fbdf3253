"""``tilus.autotune``: the configuration space, pinning, and running every config."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import tilus
from tilus import float32, int32
from tilus.utils import cdiv


@tilus.autotune("a", [1, 2])
@tilus.autotune("b, c", [(10, 20), (30, 40)])
@tilus.autotune("d", [5, 6, 7])
class Space(tilus.Script):
    def __init__(self, a, b, c, d, extra=0):
        super().__init__()
        self.values = (a, b, c, d, extra)

    def __call__(self, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[5])
        r = self.register_tensor(dtype=int32, shape=[5], init=0)
        for i, v in list(enumerate(self.values)):
            r[i] = v
        self.store_global(g, r, offsets=[0])


def test_stacked_decorators_form_the_product_bottom_first():
    want = [
        {"d": d, "b": b, "c": c, "a": a}
        for d in (5, 6, 7)
        for b, c in ((10, 20), (30, 40))
        for a in (1, 2)
    ]
    configs = Space().configs
    assert configs == want
    assert [list(cfg) for cfg in configs] == [["d", "b", "c", "a"]] * len(want)


def test_configs_are_copies():
    k = Space()
    k.configs[0]["a"] = 99
    assert k.configs[0]["a"] == 1


def test_pinning_through_constructor_kwargs_removes_the_dimension():
    k = Space(a=2)
    assert len(k.configs) == 6
    assert all("a" not in cfg for cfg in k.configs)
    k = Space(b=1, c=2)
    assert k.configs == [{"d": d, "a": a} for d in (5, 6, 7) for a in (1, 2)]
    k = Space(a=1, b=1, c=2, d=3)
    assert k.configs == [{}]
    out = np.full(5, -1, dtype=np.int32)
    k(out)
    assert list(out) == [1, 1, 2, 3, 0]


def test_a_config_reaches_the_constructor():
    out = np.full(5, -1, dtype=np.int32)
    Space(extra=9)(out)  # runs the first config
    assert list(out) == [1, 10, 20, 5, 9]


def test_pinning_part_of_a_group_is_an_error():
    with pytest.raises(tilus.TilusError, match=r"b, c"):
        Space(b=10)


def test_constructor_args_conflicting_with_the_space_are_an_error():
    with pytest.raises(tilus.TilusError):
        Space(1)  # positional `a` collides with the tuned `a`
    with pytest.raises(tilus.TilusError):
        Space(nonexistent=3)


def test_naming_a_parameter_twice_raises():
    with pytest.raises(tilus.TilusError, match="b"):

        @tilus.autotune("b", [1, 2])
        @tilus.autotune("a, b", [(1, 2)])
        class Twice(tilus.Script):
            def __init__(self, a, b):
                super().__init__()

    with pytest.raises(tilus.TilusError, match="a"):

        @tilus.autotune("a", [3])
        @tilus.autotune("a", [1, 2])
        class Twice2(tilus.Script):
            def __init__(self, a):
                super().__init__()


def test_malformed_autotune_arguments():
    with pytest.raises(tilus.TilusError):
        tilus.autotune("a", [])
    with pytest.raises(tilus.TilusError):
        tilus.autotune("a, b", [(1, 2), (3,)])
    with pytest.raises(tilus.TilusError):
        tilus.autotune("", [1])


def test_subclass_space_extends_the_parent_space():
    @tilus.autotune("x", [1, 2])
    class Parent(tilus.Script):
        def __init__(self, x, y=0):
            super().__init__()

    @tilus.autotune("y", [3, 4, 5])
    class Child(Parent):
        pass

    assert len(Parent().configs) == 2
    assert len(Child().configs) == 6


# --------------------------------------------------------------------------------------------
# running every config on the interpreter


@tilus.autotune("block", [16, 32, 64])
@tilus.autotune("warps", [1, 2])
class Tiled(tilus.Script):
    """The result does not depend on the config; each config announces itself with printf."""

    def __init__(self, block, warps):
        super().__init__()
        self.block = block
        self.warps = warps

    def __call__(self, n: int32, x_ptr: ~float32, y_ptr: ~float32):
        self.attrs.blocks = cdiv(n, self.block)
        self.attrs.warps = self.warps
        if self.blockIdx.x == 0:
            self.printf("config block=%d warps=%d\n", self.block, self.warps)
        off = self.blockIdx.x * self.block
        gx = self.global_view(x_ptr, dtype=float32, shape=[n])
        gy = self.global_view(y_ptr, dtype=float32, shape=[n])
        x = self.load_global(gx, offsets=[off], shape=[self.block])
        self.store_global(gy, x * 3.0 + 1.0, offsets=[off])


def _vec(n):
    rng = np.random.default_rng()
    return rng.uniform(-3, 3, size=n).astype(np.float32), np.full(n, np.nan, np.float32)


def _announced(out: str) -> list[tuple[int, int]]:
    return [(int(b), int(w)) for b, w in re.findall(r"config block=(\d+) warps=(\d+)", out)]


def test_only_the_first_config_runs_by_default(capsys):
    x, y = _vec(100)
    Tiled()(100, x, y)
    np.testing.assert_allclose(y, x.astype(np.float64) * 3 + 1, rtol=1e-6, atol=1e-6)
    assert _announced(capsys.readouterr().out) == [(16, 1)]


def test_interpret_all_configs_runs_every_config(capsys):
    x, y = _vec(100)
    with tilus.option.scoped(interpret_all_configs=True):
        Tiled()(100, x, y)
    np.testing.assert_allclose(y, x.astype(np.float64) * 3 + 1, rtol=1e-6, atol=1e-6)
    ran = _announced(capsys.readouterr().out)
    assert sorted(ran) == sorted((b, w) for w in (1, 2) for b in (16, 32, 64))
    assert len(ran) == 6


def test_every_config_sees_the_original_inputs():
    @tilus.autotune("block", [16, 32])
    class InPlace(tilus.Script):
        def __init__(self, block):
            super().__init__()
            self.block = block

        def __call__(self, n: int32, x_ptr: ~float32):
            self.attrs.blocks = cdiv(n, self.block)
            self.attrs.warps = 1
            off = self.blockIdx.x * self.block
            gx = self.global_view(x_ptr, dtype=float32, shape=[n])
            x = self.load_global(gx, offsets=[off], shape=[self.block])
            self.store_global(gx, x * 2.0, offsets=[off])

    x, _ = _vec(50)
    orig = x.copy()
    with tilus.option.scoped(interpret_all_configs=True):
        InPlace()(50, x)
    np.testing.assert_array_equal(x, orig * 2)  # doubled once, not once per config


@tilus.autotune("scale", [1.0, 1.0, 2.0])
class Disagree(tilus.Script):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def __call__(self, n: int32, x_ptr: ~float32, y_ptr: ~float32):
        self.attrs.blocks = cdiv(n, 32)
        self.attrs.warps = 1
        off = self.blockIdx.x * 32
        gx = self.global_view(x_ptr, dtype=float32, shape=[n])
        gy = self.global_view(y_ptr, dtype=float32, shape=[n])
        x = self.load_global(gx, offsets=[off], shape=[32])
        self.store_global(gy, x * self.scale, offsets=[off])


def test_disagreeing_configs_raise_naming_the_config():
    x, y = _vec(40)
    with tilus.option.scoped(interpret_all_configs=True):
        with pytest.raises(tilus.TilusRuntimeError) as info:
            Disagree()(40, x, y)
    text = str(info.value)
    assert "{'scale': 2.0}" in text, text
    assert "y_ptr" in text


def test_disagreeing_configs_are_not_checked_by_default():
    x, y = _vec(40)
    Disagree()(40, x, y)
    np.testing.assert_array_equal(y, x)


@tilus.autotune("rows", [1024, 256, 64])
class SharedHungry(tilus.Script):
    def __init__(self, rows):
        super().__init__()
        self.rows = rows

    def __call__(self, x_ptr: ~float32, y_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        gx = self.global_view(x_ptr, dtype=float32, shape=[64, 64])
        gy = self.global_view(y_ptr, dtype=float32, shape=[64, 64])
        s = self.shared_tensor(dtype=float32, shape=[self.rows, 64])  # 1024 rows: 256 KiB
        t = self.load_global(gx, offsets=[0, 0], shape=[64, 64])
        self.store_global(gy, t + 1.0, offsets=[0, 0])
        self.free_shared(s)


def test_configs_over_the_shared_memory_limit_are_skipped_with_a_warning():
    rng = np.random.default_rng()
    x = rng.uniform(-1, 1, size=(64, 64)).astype(np.float32)
    y = np.full((64, 64), np.nan, np.float32)
    k = SharedHungry()
    with pytest.warns(UserWarning, match="232448") as record:
        k(x, y)
    assert any("1024" in str(w.message) for w in record)
    np.testing.assert_allclose(y, x.astype(np.float64) + 1, rtol=1e-6, atol=1e-6)
    y[...] = np.nan
    with tilus.option.scoped(interpret_all_configs=True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            k(x, y)
    np.testing.assert_allclose(y, x.astype(np.float64) + 1, rtol=1e-6, atol=1e-6)


def test_all_configs_failing_is_a_compile_error():
    @tilus.autotune("rows", [1024, 2048])
    class TooBig(tilus.Script):
        def __init__(self, rows):
            super().__init__()
            self.rows = rows

        __call__ = SharedHungry.__call__

    x = np.ones((64, 64), np.float32)
    y = np.full((64, 64), np.nan, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(tilus.TilusCompileError, match="232448"):
            TooBig()(x, y)
    assert np.isnan(y).all()


def test_compile_builds_every_config_without_running():
    k = Tiled()
    progs = k.compile(10, np.zeros(10, np.float32), np.zeros(10, np.float32))
    assert len(progs) == 6
    texts = {p.text for p in progs}
    assert len(texts) == 6  # each config is its own program


def test_debug_schedule_pins_one_config(capsys):
    class Pinned(Tiled):
        debug_schedule = {"block": 32, "warps": 2}

    assert Pinned().configs == [{"block": 32, "warps": 2}]
    x, y = _vec(70)
    with tilus.option.scoped(interpret_all_configs=True):
        Pinned()(70, x, y)
    assert _announced(capsys.readouterr().out) == [(32, 2)]
    np.testing.assert_allclose(y, x.astype(np.float64) * 3 + 1, rtol=1e-6, atol=1e-6)


def test_undecorated_subclass_inherits_the_space():
    class Sub(Space):
        pass

    assert Sub().configs == Space().configs


@tilus.autotune("block", [48, 64, 96])
class Asserted(tilus.Script):
    """static_assert rejects the configs whose block is not a multiple of 32."""

    def __init__(self, block):
        super().__init__()
        self.block = block

    def __call__(self, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        self.static_assert(self.block % 32 == 0, "block must be a multiple of 32")
        g = self.global_view(out, dtype=int32, shape=[64])
        r = self.register_tensor(dtype=int32, shape=[self.block], init=self.block)
        self.store_global(g, r, offsets=[0])


def test_configs_rejected_by_static_assert_are_dropped():
    out = np.full(64, -1, dtype=np.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Asserted()(out)
    assert out.tolist() == [64] * 64
