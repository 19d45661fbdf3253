"""``tilus.autotune``: stacked class decorators that define a Script's configuration space."""

from __future__ import annotations

import itertools

from tilus.errors import TilusError


def autotune(arg_names: str, arg_values):
    """Add a dimension to the autotune space of a Script class.

    Args:
        arg_names: one constructor parameter name, or several separated by commas
            (``"block_m, block_n"``), whose values are then tuples.
        arg_values: the candidate values.
    """
    names = tuple(n.strip() for n in arg_names.split(",") if n.strip())
    if not names:
        raise TilusError("autotune needs at least one parameter name")
    values = list(arg_values)
    if not values:
        raise TilusError(f"autotune({arg_names!r}) got no values")
    if len(names) > 1:
        for v in values:
            if not isinstance(v, (tuple, list)) or len(v) != len(names):
                raise TilusError(
                    f"autotune({arg_names!r}): each value must be a tuple of "
                    f"{len(names)} items, got {v!r}"
                )

    def wrap(cls):
        space = dict(getattr(cls, "_autotune_space", {}))  # inherit the parent's dims
        own = set(cls.__dict__.get("_autotune_own", ()))
        for key in list(space):
            clash = set(key) & set(names)
            if clash and key in own:
                raise TilusError(
                    f"autotune: {', '.join(sorted(clash))} is given twice on {cls.__name__}"
                )
            if clash:  # a subclass re-tunes a dimension of its parent: replace it
                del space[key]
        space[names] = values
        cls._autotune_space = space
        cls._autotune_own = own | {names}
        return cls

    return wrap


def expand_space(space: dict, pinned: dict) -> list[dict]:
    """The Cartesian product of the space (bottom decorator first), minus pinned names."""
    dims = []
    for names, values in space.items():
        given = [n for n in names if n in pinned]
        if given and len(given) != len(names):
            raise TilusError(
                f"autotune group ({', '.join(names)}) is only partly pinned by "
                f"the constructor arguments ({', '.join(given)})"
            )
        if given:
            continue
        dims.append([dict(zip(names, v if len(names) > 1 else (v,))) for v in values])
    configs = []
    for combo in itertools.product(*dims):
        cfg = {}
        for part in combo:
            cfg.update(part)
        configs.append(cfg)
    return configs
