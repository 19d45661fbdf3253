"""``python -m tilus``: info, inspect, cache and tune, in process (fast) and as a module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tilus.cli import COMMANDS, main

REPO = Path(__file__).resolve().parents[1]

KERNEL = textwrap.dedent(
    '''
    import tilus
    from tilus import float32, int32
    from tilus.utils import cdiv


    @tilus.autotune("block", [64, 128])
    class Scale(tilus.Script):
        """y = x * 3 over n elements; ``width`` is compile-time with no default."""

        def __init__(self, block):
            super().__init__()
            self.block = block

        def __call__(self, width: int, n: int32, x_ptr: ~float32, y_ptr: ~float32):
            self.attrs.blocks = cdiv(n, self.block)
            self.attrs.warps = 2
            gx = self.global_view(x_ptr, dtype=float32, shape=[n])
            gy = self.global_view(y_ptr, dtype=float32, shape=[n])
            x = self.load_global(gx, offsets=[self.blockIdx.x * self.block], shape=[self.block])
            self.store_global(gy, x * (3.0 + width * 0), offsets=[self.blockIdx.x * self.block])
    '''
)


@pytest.fixture
def kernel_file(tmp_path):
    path = tmp_path / "scale_kernel.py"
    path.write_text(KERNEL)
    return path


def _nvrtc() -> bool:
    try:
        from tilus.runtime.nvrtc import nvrtc_version

        nvrtc_version()
        return True
    except Exception:
        return False


needs_nvrtc = pytest.mark.skipif(not _nvrtc(), reason="NVRTC is not installed ('cuda' extra)")


def _run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


# --- help ------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [None] + [name for name, _ in COMMANDS])
def test_help_of_each_command(capsys, command):
    argv = ([command] if command else []) + ["--help"]
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: python -m tilus"), text
    if command is None:
        for name, _ in COMMANDS:
            assert name in text


def test_cache_actions_have_help(capsys):
    for action in ("path", "list", "size", "clear", "verify"):
        with pytest.raises(SystemExit):
            main(["cache", action, "--help"])
        assert f"cache {action}" in capsys.readouterr().out


def test_no_command_prints_usage(capsys):
    rc, out, _ = _run(capsys)
    assert rc == 2 and "COMMAND" in out


# --- info ------------------------------------------------------------------------------------
def test_info_runs_without_torch_and_without_gpu(tmp_path):
    """torch made unimportable; the machine may have no GPU: info still answers."""
    code = "import sys; sys.modules['torch'] = None; from tilus.cli import main; main(['info'])"
    env = {**os.environ, "PYTHONPATH": str(REPO), "TILUS_CACHE_DIR": str(tmp_path / "c")}
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert r.returncode == 0, r.stderr
    lines = dict(line.split(None, 1) for line in r.stdout.splitlines() if " " in line.strip())
    assert lines["tilus"].startswith("0.") and str(REPO / "tilus") in lines["tilus"]
    assert lines["torch"].startswith("unavailable")
    assert lines["cache"].startswith("dir") and str(tmp_path / "c") in lines["cache"]
    assert "interpreter" in r.stdout and "CUDA launch" in r.stdout
    assert "no: torch is not installed" in r.stdout


def test_info_json(capsys):
    rc, out, _ = _run(capsys, "info", "--json")
    facts = json.loads(out)
    assert rc == 0
    assert set(facts["backends"]) == {"interpreter", "CUDA compile", "CUDA launch", "SASS tools"}
    assert facts["backends"]["interpreter"].startswith("yes")


def test_python_dash_m_tilus(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "TILUS_CACHE_DIR": str(tmp_path)}
    r = subprocess.run(
        [sys.executable, "-m", "tilus", "cache", "path"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(tmp_path)


# --- inspect ---------------------------------------------------------------------------------
def test_inspect_ir_with_made_up_arguments(capsys, kernel_file):
    rc, out, err = _run(capsys, "inspect", f"{kernel_file}:Scale", "--ir")
    assert rc == 0, err
    assert "made-up arguments (set with --args): width=128" in err
    assert "config {'block': 64}" in err
    assert "load_global" in out


def test_inspect_cuda_source_of_a_pinned_config(capsys, kernel_file):
    rc, out, err = _run(
        capsys, "inspect", f"{kernel_file}:Scale", "--config", "block=128", "--args", "width=4"
    )
    assert rc == (0 if _nvrtc() else 1), err
    rc, out, err = _run(
        capsys, "inspect", f"{kernel_file}:Scale", "--config", "block=128", "--cuda", "--args", "4"
    )
    assert rc == 0, err
    assert "config {'block': 128}" in err and "made-up" not in err
    assert 'extern "C"' in out and "tl_Scale" in out


def test_inspect_unaligned_build(capsys, kernel_file):
    """``--unaligned``: the build a call with a misaligned pointer gets, with the alignment
    tests that the usual build (16-byte aligned pointers, checked at launch) leaves out."""
    base = ("inspect", f"{kernel_file}:Scale", "--config", "block=256", "--args", "width=4")
    rc, out, err = _run(capsys, *base, "--ir", "--unaligned")
    assert rc == 0, err
    assert "pointer_align 1" in out
    rc, out, err = _run(capsys, *base, "--ir")
    assert rc == 0 and "pointer_align" not in out, err
    rc, out, err = _run(capsys, *base, "--cuda", "--unaligned")
    assert rc == 0 and "& 15) == 0" in out, err
    rc, out, err = _run(capsys, *base, "--cuda")
    assert rc == 0 and "& 15) == 0" not in out and "uint4" in out, err
    if _nvrtc():
        rc, out, err = _run(capsys, *base, "--unaligned", "--json")
        assert rc == 0 and json.loads(out.splitlines()[-1])["registers"] > 0, err


def test_inspect_layouts_names_the_moves_through_shared_memory(capsys):
    path = REPO / "tests" / "cuda" / "test_cuda_element.py"
    rc, out, err = _run(capsys, "inspect", f"{path}:SquareDot", "--layouts")
    assert rc == 0, err
    assert "%x [32, 32] float16: mma_a, 16 per thread, over threads [0, 128)" in out
    assert "through shared memory:\n  line " in out
    assert "%x (mma_a) copied into mma_b for this dot" in out
    rc, out, err = _run(capsys, "inspect", f"{path}:ElementRead", "--config", "bm=16", "bn=64",
                        "warps=4", "--layouts")  # fmt: skip
    assert rc == 0, err
    assert out.count("element of %x broadcast to the group") == 4


@needs_nvrtc
def test_inspect_resources_and_cache(capsys, kernel_file, tmp_path):
    cache = str(tmp_path / "cache")
    rc, out, err = _run(
        capsys, "--cache-dir", cache, "inspect", f"{kernel_file}:Scale", "--all-configs", "--json"
    )
    assert rc == 0, err
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [r["threads"] for r in rows] == [64, 64]
    assert all(r["registers"] > 0 and r["spill_store_bytes"] == 0 for r in rows)
    # the two configs are now in the cache
    rc, out, _ = _run(capsys, "--cache-dir", cache, "cache", "list")
    assert rc == 0 and out.count("tl_Scale") == 2 and "block=128" in out
    rc, out, _ = _run(capsys, "--cache-dir", cache, "cache", "size")
    assert "compiled kernels: 2 entries" in out
    rc, out, _ = _run(capsys, "--cache-dir", cache, "cache", "clear")
    assert "removed 2 compiled entries" in out
    rc, out, _ = _run(capsys, "--cache-dir", cache, "cache", "list")
    assert "no compiled kernels" in out


@needs_nvrtc
def test_inspect_sass(capsys, kernel_file, tmp_path):
    from tilus.errors import TilusBackendError
    from tilus.runtime.sass import find_tool

    try:
        find_tool("cuobjdump")
    except TilusBackendError:
        pytest.skip("cuobjdump is not installed")
    rc, out, err = _run(
        capsys, "--cache-dir", str(tmp_path), "inspect", f"{kernel_file}:Scale", "--sass"
    )
    assert rc == 0, err
    assert "LDG" in out and "STG" in out


def test_inspect_errors_are_reported(capsys, kernel_file):
    rc, _, err = _run(capsys, "inspect", f"{kernel_file}:Nope", "--ir")
    assert rc == 1 and "defines no 'Nope'; its kernels: Scale" in err
    rc, _, err = _run(capsys, "inspect", str(kernel_file), "--ir")
    assert rc == 1 and "FILE:Class" in err
    rc, _, err = _run(capsys, "inspect", f"{kernel_file}:Scale", "--args", "depth=3", "--ir")
    assert rc == 1 and "no parameter 'depth'" in err


# --- cache -----------------------------------------------------------------------------------
def test_cache_path_and_empty_listing(capsys, tmp_path):
    rc, out, _ = _run(capsys, "--cache-dir", str(tmp_path), "cache", "path")
    assert rc == 0 and out.strip() == str(tmp_path)
    rc, out, _ = _run(capsys, "--cache-dir", str(tmp_path), "cache", "list")
    assert "no compiled kernels" in out


def test_cache_verify(capsys, tmp_path):
    from tilus.runtime.cache import ArtifactCache

    cache = ArtifactCache(tmp_path)
    entry = cache.store(
        "0123456789abcdef", {"kernel.cubin": b"\x7fELF" + bytes(60)}, {"kernel": "k"}
    )
    rc, out, _ = _run(capsys, "--cache-dir", str(tmp_path), "cache", "verify")
    assert rc == 0 and "1 entries checked, 1 intact" in out, out
    (entry / "kernel.cubin").write_bytes(b"\x7fELF" + bytes(59))  # truncated by a crash
    rc, out, _ = _run(capsys, "--cache-dir", str(tmp_path), "cache", "verify", "--keep")
    assert rc == 1 and "BAD" in out and entry.is_dir(), out
    rc, out, _ = _run(capsys, "--cache-dir", str(tmp_path), "cache", "verify")
    assert rc == 1 and "dropped" in out and not entry.exists(), out
    rc, out, _ = _run(capsys, "--cache-dir", str(tmp_path), "cache", "verify")
    assert rc == 0 and "0 entries checked" in out, out


# --- tune ------------------------------------------------------------------------------------
def _table(root):
    from tilus.tune.dispatch import DispatchTable, Entry

    table = DispatchTable(root / "dispatch" / "scale_kernel.json")
    table.record(
        "k1",
        Entry(
            winner={"block": 128},
            times=[
                {"config": {"block": 128}, "median_ms": 0.5, "min_ms": 0.4},
                {"config": {"block": 64}, "median_ms": 0.7, "min_ms": 0.6},
            ],
            failed=[{"config": {"block": 256}, "reason": "too many registers\nsecond line"}],
            fingerprint={"device": "NVIDIA H200"},
        ),
    )
    return table


def test_tune_shows_winners_and_failures(capsys, tmp_path):
    _table(tmp_path)
    rc, out, _ = _run(capsys, "--cache-dir", str(tmp_path), "tune")
    assert rc == 0
    assert "winner: block=128" in out
    assert "FAILED block=256: too many registers" in out and "second line" not in out
    rc, out, _ = _run(capsys, "--cache-dir", str(tmp_path), "tune", "ScaleKernel", "--full")
    assert "second line" in out
    rc, out, _ = _run(capsys, "--cache-dir", str(tmp_path), "tune", "--json")
    assert json.loads(out)["scale_kernel"]["k1"]["winner"] == {"block": 128}
    rc, out, _ = _run(capsys, "--cache-dir", str(tmp_path), "tune", "Other")
    assert rc == 1 and "no dispatch tables for Other" in out


def test_inspect_config_values_name_dtypes():
    """``--config wdtype=uint2b`` (or ``tilus.uint2b``) passes the data type, not its name."""
    import tilus
    from tilus.cli.inspect_cmd import _value

    assert _value("uint2b") is tilus.uint2b
    assert _value("tilus.float6_e3m2") is tilus.float6_e3m2
    assert _value("128") == 128 and _value("True") is True
    assert _value("fast") == "fast"
