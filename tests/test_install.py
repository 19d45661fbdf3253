"""The install: a checkout named `tilus` beside a user's script does not hide the installed tilus."""

import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = "import tilus\nprint(tilus.__file__)\nprint(tilus.Script.__name__)\n"


def _run_script(folder: pathlib.Path) -> subprocess.CompletedProcess:
    script = folder / "use_tilus.py"
    script.write_text(SCRIPT)
    return subprocess.run(
        [sys.executable, str(script)], cwd=folder, capture_output=True, text=True, timeout=120
    )


def test_a_folder_named_tilus_beside_the_script_does_not_shadow_the_install(tmp_path):
    plain, beside = tmp_path / "plain", tmp_path / "beside"
    plain.mkdir()
    (beside / "tilus").mkdir(parents=True)  # a checkout named tilus: no __init__.py at its root
    (beside / "tilus" / "README.md").write_text("a checkout\n")
    installed = _run_script(plain)
    assert installed.returncode == 0, installed.stderr
    shadowed = _run_script(beside)
    assert shadowed.returncode == 0, shadowed.stderr
    assert shadowed.stdout == installed.stdout  # the same tilus, with Script


def test_the_documented_install_uses_the_compat_editable_mode():
    command = '-e ".[cuda,test]" --config-settings editable_mode=compat'
    for doc in ("README.md", "docs/guide/01-install.md", ".ci/run"):
        assert command in (REPO / doc).read_text(), doc
