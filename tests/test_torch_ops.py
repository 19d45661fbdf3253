"""tilus kernels as torch custom operators inside torch.compile, and DLPack inputs (CPU)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tilus  # noqa: E402
import tilus.torch  # noqa: E402
from tilus import float32, int32  # noqa: E402
from tilus.utils import cdiv  # noqa: E402


@tilus.autotune("block", [64, 128])
class AddScaled(tilus.Script):
    """``z = x + alpha * y`` over ``n`` elements."""

    def __init__(self, block):
        super().__init__()
        self.block = block

    def __call__(self, n: int32, alpha: float32, x_ptr: ~float32, y_ptr: ~float32, z_ptr: ~float32):
        self.attrs.blocks = cdiv(n, self.block)
        self.attrs.warps = 2
        off: int32 = self.blockIdx.x * self.block
        gx = self.global_view(x_ptr, dtype=float32, shape=[n])
        gy = self.global_view(y_ptr, dtype=float32, shape=[n])
        gz = self.global_view(z_ptr, dtype=float32, shape=[n])
        x = self.load_global(gx, offsets=[off], shape=[self.block])
        y = self.load_global(gy, offsets=[off], shape=[self.block])
        self.store_global(gz, x + y * alpha, offsets=[off])


add_scaled = tilus.torch.custom_op(
    "tilus_tests::add_scaled", AddScaled(), outputs={"z_ptr": "x_ptr"}
)
add_scaled_ = tilus.torch.custom_op("tilus_tests::add_scaled_", AddScaled(), mutates=["z_ptr"])
add_scaled_flat = tilus.torch.custom_op(
    "tilus_tests::add_scaled_flat",
    AddScaled(),
    outputs={"z_ptr": lambda a: ((a["n"],), torch.float32)},
)


def _xy(n=777):
    return torch.randn(n), torch.randn(n)


def test_the_operator_returns_its_output():
    x, y = _xy()
    z = add_scaled(777, 0.5, x, y)
    torch.testing.assert_close(z, x + 0.5 * y)
    assert str(torch.ops.tilus_tests.add_scaled.default._schema).endswith(
        "(SymInt n, float alpha, Tensor x_ptr, Tensor y_ptr) -> Tensor"
    )


def test_torch_compile_keeps_the_operator_in_its_graph():
    def f(x, y):
        return add_scaled(x.numel(), 2.0, x.sin(), y) * 3

    x, y = _xy(1000)
    got = torch.compile(f, backend="aot_eager", fullgraph=True)(x, y)
    torch.testing.assert_close(got, (x.sin() + 2.0 * y) * 3)


def test_torch_compile_of_the_in_place_operator():
    def f(x, y):
        z = torch.empty_like(x)
        add_scaled_(x.numel(), -1.0, x, y, z)
        return z + 1

    x, y = _xy(300)
    got = torch.compile(f, backend="aot_eager", fullgraph=True)(x, y)
    torch.testing.assert_close(got, x - y + 1)


def test_in_place_operator_eager_and_shape_function():
    x, y = _xy(129)
    z = torch.full_like(x, float("nan"))
    assert add_scaled_(129, 3.0, x, y, z) is None
    torch.testing.assert_close(z, x + 3.0 * y)
    w = add_scaled_flat(100, 1.0, x, y)  # only the first 100 elements
    assert w.shape == (100,)
    torch.testing.assert_close(w, x[:100] + y[:100])


def test_opcheck_of_the_operator():
    x, y = _xy(64)
    torch.library.opcheck(
        torch.ops.tilus_tests.add_scaled.default,
        (64, 1.5, x, y),
        test_utils=("test_schema", "test_faketensor"),
    )


def test_bad_operator_definitions_are_refused():
    with pytest.raises(tilus.TilusArgumentError, match="'n' is not a pointer parameter"):
        tilus.torch.custom_op("tilus_tests::bad1", AddScaled(), outputs={"n": "x_ptr"})
    with pytest.raises(tilus.TilusArgumentError, match="shaped like 'alpha'"):
        tilus.torch.custom_op("tilus_tests::bad2", AddScaled(), outputs={"z_ptr": "alpha"})


# --- DLPack ---------------------------------------------------------------------------------
class Exported:
    """An array known only through the DLPack protocol (as CuPy and JAX arrays are)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, *args, **kwargs):
        return self._a.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def _arrays(n=500):
    rng = np.random.default_rng()
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    return x, y, np.full(n, np.nan, np.float32)


def test_dlpack_inputs_are_accepted_where_tensors_are():
    x, y, z = _arrays()
    AddScaled()(500, 0.25, Exported(x), Exported(y), Exported(z))
    np.testing.assert_allclose(z, x + 0.25 * y, rtol=1e-6)  # written through the export


def test_dlpack_inputs_without_torch(monkeypatch):
    x, y, z = _arrays(70)
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` fails: NumPy takes them
    AddScaled()(70, 1.0, Exported(x), Exported(y), Exported(z))
    np.testing.assert_allclose(z, x + y, rtol=1e-6)


def test_a_failing_dlpack_export_names_the_argument():
    class Broken(Exported):
        def __dlpack__(self, *args, **kwargs):
            raise BufferError("no export today")

    x, y, z = _arrays(10)
    with pytest.raises(tilus.TilusArgumentError, match="argument 'y_ptr' .*no export today"):
        AddScaled()(10, 1.0, x, Broken(y), z)
