"""GPU tests: load and launch kernels through tilus.runtime on a Hopper GPU (torch memory)."""

from __future__ import annotations

import pytest

from tilus.errors import TilusBackendError

pytestmark = pytest.mark.gpu


def _load(source: str):
    from tilus.runtime.driver import Module
    from tilus.runtime.nvrtc import compile_cuda

    return Module.load(compile_cuda(source).cubin)


def _stream(torch) -> int:
    return torch.cuda.current_stream().cuda_stream


def test_device_properties(torch_cuda):
    from tilus.runtime.driver import device_properties

    dev = torch_cuda.cuda.current_device()
    props = device_properties(dev)
    assert (props["cc_major"], props["cc_minor"]) == torch_cuda.cuda.get_device_capability()
    assert props["sm_count"] == torch_cuda.cuda.get_device_properties(dev).multi_processor_count
    assert props["max_smem_per_block_optin"] >= 200 * 1024
    assert props["l2_bytes"] > 0 and props["name"]
    print(props)


def test_add_one(torch_cuda, add_one_source):
    torch = torch_cuda
    from tilus.runtime.driver import arg_i32, arg_ptr

    kernel = _load(add_one_source).function("add_one")
    n = 1000
    x = torch.arange(n, dtype=torch.float32, device="cuda")
    kernel.launch((4, 1, 1), (256, 1, 1), 0, _stream(torch), [arg_ptr(x.data_ptr()), arg_i32(n)])
    torch.cuda.synchronize()
    assert torch.equal(x, torch.arange(n, dtype=torch.float32, device="cuda") + 1)


def test_scalar_argument_kinds(torch_cuda, add_one_source):
    torch = torch_cuda
    from tilus.runtime.driver import arg_f32, arg_i32, arg_i64, arg_ptr, arg_u32, arg_u64

    kernel = _load(add_one_source).function("echo")
    out = torch.zeros(4, dtype=torch.int64, device="cuda")
    out_f = torch.zeros(1, dtype=torch.float32, device="cuda")
    args = [
        arg_i32(-7),
        arg_u32(4_000_000_000),
        arg_i64(-(2**40)),
        arg_u64(2**62 + 3),
        arg_f32(2.5),
        arg_ptr(out.data_ptr()),
        arg_ptr(out_f.data_ptr()),
    ]
    kernel.launch((1, 1, 1), (32, 1, 1), 0, _stream(torch), args)
    torch.cuda.synchronize()
    assert out.tolist() == [-7, 4_000_000_000, -(2**40), 2**62 + 3]
    assert out_f.item() == 2.5


@pytest.mark.parametrize("rows, cols", [(128, 128), (100, 72)])
def test_tma_copy_with_oob_zero_fill(torch_cuda, tma_copy_source, rows, cols):
    torch = torch_cuda
    from tilus.runtime.driver import arg_i32, arg_ptr, arg_tensormap
    from tilus.runtime.tensormap import TensorMapCache

    kernel = _load(tma_copy_source).function("tma_copy")
    smem = 80 * 1024  # above the 48 KB default: needs the opt-in attribute
    kernel.set_max_dynamic_shared_memory(smem)

    src = torch.randn(rows, cols, device="cuda").to(torch.float16)
    grid = ((cols + 63) // 64, (rows + 63) // 64, 1)
    # The output covers whole tiles; the parts beyond `src` must come back as zeros.
    out = torch.full((grid[1] * 64, grid[0] * 64), float("nan"), dtype=torch.float16, device="cuda")
    tmaps = TensorMapCache()
    kw = dict(
        dtype_name="float16",
        address=src.data_ptr(),
        shape=tuple(src.shape),
        strides_bytes=tuple(s * src.element_size() for s in src.stride()),
        box=(64, 64),
    )
    blob = tmaps.get(**kw)
    assert len(blob) == 128 and tmaps.get(**kw) == blob and tmaps.hits == 1
    args = [arg_tensormap(blob), arg_ptr(out.data_ptr()), arg_i32(out.shape[1])]
    kernel.launch(grid, (128, 1, 1), smem, _stream(torch), args)
    torch.cuda.synchronize()
    assert torch.equal(out[:rows, :cols], src)
    assert not out[rows:, :].any() and not out[:, cols:].any()
    assert not out.isnan().any()


def test_bad_cubin_raises(torch_cuda):
    from tilus.runtime.driver import Module

    with pytest.raises(TilusBackendError, match="cuModuleLoadData"):
        Module.load(b"\x7fELF not really a cubin" + b"\x00" * 64)


def test_missing_function_raises(torch_cuda, add_one_source):
    with pytest.raises(TilusBackendError):
        _load(add_one_source).function("no_such_kernel")
