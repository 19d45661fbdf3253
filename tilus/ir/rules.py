"""Per-instruction rule tables keyed by the IR instruction class."""

from __future__ import annotations

from collections.abc import Callable


class RuleTable:
    """One rule per instruction class for one job (interpreting, lowering, layouts, effects).

    A rule is registered with ``@table.rule(ir.SomeInst, ...)`` and found by the class of the
    instruction (``table.lookup(inst)``), never by a name. A backend that cannot handle an
    instruction says so explicitly: ``not_lowered`` maps the class to a one-line reason, shared by
    every table of that backend, and ``lookup`` raises :class:`NotLowered` with it.
    ``tests/test_registry.py`` checks that every instruction has a rule or a reason in every
    table, and that no rule is registered for a class that is not an instruction.
    """

    def __init__(self, name: str, not_lowered: dict | None = None):
        self.name = name
        self.rules: dict[type, object] = {}
        self.not_lowered: dict[type, str] = not_lowered if not_lowered is not None else {}

    def rule(self, *classes: type) -> Callable:
        """Decorator: register the decorated function (or value) as the rule of ``classes``."""
        if not classes:
            raise TypeError(f"{self.name}: rule() needs at least one instruction class")

        def wrap(fn):
            for cls in classes:
                self.add(cls, fn)
            return fn

        return wrap

    def add(self, cls: type, value) -> None:
        """Register ``value`` as the rule of ``cls`` (each class at most once per table)."""
        if not isinstance(cls, type):
            raise TypeError(f"{self.name}: rules are keyed by instruction classes, got {cls!r}")
        if cls in self.rules:
            raise RuntimeError(f"{self.name}: {cls.__name__} has two rules")
        if cls in self.not_lowered:
            raise RuntimeError(f"{self.name}: {cls.__name__} has a rule and a not-lowered reason")
        self.rules[cls] = value

    def lookup(self, inst):
        """The rule of ``inst``'s class; raises :class:`NotLowered` with the recorded reason."""
        cls = inst if isinstance(inst, type) else type(inst)
        try:
            return self.rules[cls]
        except KeyError:
            reason = self.not_lowered.get(cls, "no rule is registered for it")
            raise NotLowered(cls, reason) from None

    def __contains__(self, cls) -> bool:
        return cls in self.rules

    def missing(self, classes) -> list[str]:
        """Names of ``classes`` with neither a rule nor a not-lowered reason here."""
        return sorted(
            c.__name__ for c in classes if c not in self.rules and c not in self.not_lowered
        )

    def stray(self, classes) -> list[str]:
        """Names of registered keys (rules or reasons) that are not among ``classes``."""
        known = set(classes)
        keys = set(self.rules) | set(self.not_lowered)
        return sorted(getattr(k, "__name__", repr(k)) for k in keys if k not in known)


class NotLowered(Exception):
    """Raised by :meth:`RuleTable.lookup` for an instruction a table has no rule for."""

    def __init__(self, cls: type, reason: str):
        super().__init__(f"{getattr(cls, 'NAME', '') or cls.__name__}: {reason}")
        self.cls = cls
        self.reason = reason
