"""End to end: tuning a real tilus kernel on the interpreter, persisted and reused."""

import numpy as np

import tilus
from tilus import float32, int32, option
from tilus.tune import (
    DispatchTable,
    compile_all,
    device_fingerprint,
    dispatch_key,
    script_identity,
    tune,
    tuning_ints,
)
from tilus.utils import cdiv


@tilus.autotune("block", [32, 64, 128])
class TuneVecAdd(tilus.Script):
    def __init__(self, block):
        super().__init__()
        self.block = block

    def __call__(self, n: int32, a: ~float32, b: ~float32, c: ~float32):
        self.attrs.blocks = [cdiv(n, self.block)]
        self.attrs.warps = 1
        ga = self.global_view(a, dtype=float32, shape=[n])
        gb = self.global_view(b, dtype=float32, shape=[n])
        gc = self.global_view(c, dtype=float32, shape=[n])
        offset: int32 = self.blockIdx.x * self.block
        x = self.load_global(ga, offsets=[offset], shape=[self.block])
        y = self.load_global(gb, offsets=[offset], shape=[self.block])
        self.store_global(gc, x + y, offsets=[offset])


N = 300


def make_args():
    rng = np.random.default_rng(0)
    a = rng.standard_normal(N).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    return [N, a, b, np.zeros(N, dtype=np.float32)]


def compile_config(cfg):
    """Transpile and lower one config (what the CUDA path would also build)."""
    kernel = TuneVecAdd()
    const_args, _ = kernel.bind(make_args(), {})
    kernel.program(cfg, const_args)
    return "ok"


def tune_once(calls):
    kernel = TuneVecAdd()
    const_args, runtime = kernel.bind(make_args(), {})
    fp = device_fingerprint(interpreter=True)
    key = dispatch_key(
        script_identity(kernel), const_args, kernel.configs, tuning_ints(runtime), fp
    )
    built = compile_all(kernel.configs, compile_config, workers=2, progress=False)

    def runner_for(cfg):
        pinned = TuneVecAdd(**cfg)  # a kernel with this config only

        def run(*args):
            calls.append(cfg["block"])
            pinned(*args)

        return run

    candidates = [(r.config, runner_for(r.config)) for r in built if r.ok]
    failed = [(r.config, r.error) for r in built if not r.ok]
    table = DispatchTable.for_script(TuneVecAdd)
    return tune(
        candidates,
        make_args,
        outputs=[3],
        table=table,
        key=key,
        fingerprint=fp,
        failed=failed,
        warmup=0,
        repeat=2,
        info={"n": N},
    ), table


def test_tune_vector_add_on_the_interpreter(tmp_path):
    with option.scoped(cache_dir=str(tmp_path)):
        calls = []
        first, table = tune_once(calls)
        assert not first.cached and first.winner in TuneVecAdd().configs
        assert sorted(set(calls)) == [32, 64, 128]  # every config checked and timed
        assert len(first.timings) == 3 and not first.disagreements and not first.failures
        assert table.path == tmp_path / "dispatch" / "tune_vec_add.json"
        assert table.path.is_file() and table.report_path.is_file()
        assert "winner: block=" in table.report_path.read_text()

        calls.clear()
        second, _ = tune_once(calls)  # as a later process would: reads the file
        assert second.cached and second.winner == first.winner and calls == []

    # the winner computes the right thing
    args = make_args()
    TuneVecAdd(**second.winner)(*args)
    np.testing.assert_allclose(args[3], args[1] + args[2], rtol=1e-6)


def build_program(cfg, const_args):
    """The 'build' step, run in a worker: lowers the config and returns a picklable artifact.

    (Lowered programs pickle, but unpickling breaks the identity of the IR's global variables
    such as blockIdx, so the artifact is a token and the loader looks the program up here,
    as the CUDA path would load a cubin from the on-disk cache.)
    """
    TuneVecAdd().program(cfg, const_args)
    return ("lowered", cfg["block"])


def make_loader(launched):
    from tilus.backends.interp.launch import prepare, run_program

    def load(cfg, const_args, artifact):
        assert artifact == ("lowered", cfg["block"])
        program = TuneVecAdd().program(cfg, const_args)

        def launch(*values):
            launched.append(cfg["block"])
            kernel = TuneVecAdd()
            _, runtime = kernel.bind(values, {})
            prepared, _ = prepare("TuneVecAdd", runtime)
            run_program(program, prepared)

        return launch

    return load


def test_autotuner_select(tmp_path):
    from tilus.tune import Autotuner

    kernel = TuneVecAdd()
    table = DispatchTable(tmp_path / "vec.json")
    launched = []
    tuner = Autotuner(kernel, build_program, make_loader(launched), table=table, progress=False)
    args = make_args()
    const_args, runtime = kernel.bind(args, {})
    sel = tuner.select(const_args, runtime)
    assert sel.config in kernel.configs and sel.result is not None
    assert sorted(set(launched)) == [32, 64, 128]
    assert np.all(args[3] == 0)  # tuning ran on clones, never on the caller's arrays
    sel.launch(*args)
    np.testing.assert_allclose(args[3], args[1] + args[2], rtol=1e-6)

    launched.clear()
    _, runtime2 = kernel.bind([N - 10, *args[1:]], {})  # same bucket: the in-memory fast path
    assert tuner.select(const_args, runtime2) is sel and launched == []

    built = []

    def counting_build(cfg, const_args):
        built.append(cfg)
        return build_program(cfg, const_args)

    later = Autotuner(
        kernel, counting_build, make_loader(launched), table=DispatchTable(table.path)
    )
    again = later.select(const_args, runtime)  # a later process: only the winner is built
    assert again.config == sel.config and again.result.cached and not again.result.timings
    assert built == [sel.config] and launched == []
