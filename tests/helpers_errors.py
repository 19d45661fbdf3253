"""Shared helpers of the split test_frontend_errors tests."""

from __future__ import annotations

import inspect
import os
import re

import numpy as np
import pytest

import tilus


def err_line(obj) -> int:
    """The line of ``obj``'s source that carries the ``# ERR`` marker."""
    lines, first = inspect.getsourcelines(obj)
    hits = [first + i for i, text in enumerate(lines) if "# ERR" in text]
    assert len(hits) == 1, f"{obj} needs exactly one # ERR marker"
    return hits[0]


def _args(kernel_cls):
    """Plausible arguments for a kernel's parameters (the kernels below use few kinds)."""
    from tilus.lang.frontend.kernel import kernel_params

    out = []
    for _name, ann, _ in kernel_params(kernel_cls):
        if ann is int:
            out.append(4)
        elif isinstance(ann, tilus.PointerType):
            out.append(np.ones(64 * 64, dtype=ann.base.np_storage))
        else:
            out.append(4)
    return out


def expect_error(kernel_cls, cls=tilus.TilusProgramError, fragment=None, marker_obj=None, *a):
    """Call the kernel and check the error's type, file, line and message."""
    args = a or _args(kernel_cls)
    with pytest.raises(cls) as info:
        kernel_cls()(*args)
    err = info.value
    text = str(err)
    assert type(err) is cls, f"{type(err).__name__}: {text}"
    assert err.loc is not None, text
    this_file = os.path.basename(inspect.getsourcefile(marker_obj or kernel_cls))
    assert os.path.basename(err.loc.file) == this_file, text
    assert err.loc.line == err_line(marker_obj or kernel_cls), text
    head = text.splitlines()[0]
    assert re.match(rf".*{re.escape(this_file)}:{err.loc.line}:\d+ \(in \w+\): ", head), head
    if fragment is not None:  # searched in the message itself, not in the quoted source line
        msg = "\n".join([err.msg, *err.notes])
        assert re.search(fragment, msg, re.IGNORECASE), text
    return err
