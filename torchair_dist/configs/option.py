"""Validated option values.

Every config option is an :class:`Option`: a typed value with a default, a validator, and a
one-line doc. Reading ``config.debug.run_eagerly`` gives the Option; ``.raw`` is its typed
Python value and ``.value`` its TorchAir-compatible string form (True -> "1", False -> "0").
Assigning ``config.debug.run_eagerly = True`` validates and stores the value; a bad value
raises an error naming the option and what it accepts.
"""
from __future__ import annotations

import contextlib
import os
import re
from typing import Any, Iterator, Optional, Sequence, Set

from ..errors import ConfigError, ConfigPathError, ConfigTypeError

INT64_MAX = 2**63 - 1

# The option paths read through ``.raw``/``.value`` while a :func:`track_option_reads` block is
# open (None: not tracking). Lets tests prove that the pipeline's declared reads are the reads
# the code really makes. Config bookkeeping (copies, equality, cache keys) reads ``_raw``.
_reads: Optional[Set[str]] = None


@contextlib.contextmanager
def track_option_reads() -> Iterator[Set[str]]:
    """Collect the dotted paths of the options read inside the block (nested blocks merge)."""
    global _reads
    outer, mine = _reads, set()
    _reads = mine
    try:
        yield mine
    finally:
        _reads = outer
        if outer is not None:
            outer |= mine


# How many times an option's value was assigned in this process, any option of any config:
# what a cached description of a config checks to know it is still current (a backend's
# identity, :class:`torchair_dist.pipeline.entry.NpuBackend`).
_writes = 0


def writes() -> int:
    """The process-wide count of option value assignments (see ``_writes``)."""
    return _writes


class Option:
    """Base class: holds a validated value. Subclasses implement :meth:`_check`."""

    kind = "any"

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "_raw":
            global _writes
            _writes += 1
        object.__setattr__(self, name, value)

    def __init__(self, default: Any = None, doc: str = ""):
        self.doc = doc
        self.name = "<option>"  # set by the owning config (dotted path)
        self.declared_default = default  # as written in the definition (docs)
        self._default = default
        self._raw = None
        if default is not None:
            self._raw = self._check(default)
        self._default = self._raw  # normalised (e.g. a path made absolute)

    # -- value access -------------------------------------------------------------------
    @property
    def raw(self) -> Any:
        """The typed Python value (bool, int, str, list, dict, callable or None)."""
        if _reads is not None:
            _reads.add(self.name)
        return self._raw

    @property
    def value(self) -> Any:
        """TorchAir's string form: True -> "1", False -> "0", None -> None, else ``str``."""
        raw = self.raw
        if raw is None or isinstance(raw, (list, dict)) or callable(raw):
            return raw
        if isinstance(raw, bool):
            return "1" if raw else "0"
        return str(raw)

    @property
    def default(self) -> Any:
        return self._default

    def is_set(self) -> bool:
        """True when the value differs from the default."""
        return self._raw != self._default

    def set(self, value: Any) -> None:
        self._raw = None if value is None and self._accepts_none() else self._check(value)

    def _accepts_none(self) -> bool:
        return True

    def _check(self, value: Any) -> Any:  # pragma: no cover - overridden
        return value

    def describe(self) -> str:
        """What the option accepts, for docs and error messages."""
        return self.kind

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Option):
            return type(self) is type(other) and self._raw == other._raw
        return NotImplemented

    __hash__ = None  # mutable, compared by value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._raw!r})"

    def _bad(self, value: Any, exc=ConfigError):
        return exc(f"Invalid value {value!r} for option '{self.name}': expected {self.describe()}")


class ChoiceOption(Option):
    """One of a fixed list of values (None allowed only when it is in the list)."""

    def __init__(self, default: Any, choices: Sequence[Any], doc: str = ""):
        self.choices = list(choices)
        super().__init__(default, doc)

    kind = "choice"

    def _accepts_none(self) -> bool:
        return None in self.choices

    def _check(self, value):
        for choice in self.choices:
            # bools are matched strictly: 1 is not True here (TorchAir lets 1/0 through `in`).
            if value == choice and type(value) is type(choice):
                return value
        raise self._bad(value)

    def describe(self) -> str:
        return "one of " + ", ".join(repr(c) for c in self.choices)


class BoolOption(ChoiceOption):
    def __init__(self, default: Optional[bool], doc: str = "", allow_none: bool = False):
        super().__init__(default, [True, False] + ([None] if allow_none else []), doc)

    def describe(self) -> str:
        return "a bool (True or False)" + (" or None" if None in self.choices else "")


class IntRangeOption(Option):
    kind = "int"

    def __init__(self, default: Optional[int], lo: int, hi: int, doc: str = ""):
        self.lo, self.hi = lo, hi
        super().__init__(default, doc)

    def _check(self, value):
        if isinstance(value, bool) or not isinstance(value, int) or not self.lo <= value <= self.hi:
            raise self._bad(value)
        return value

    def describe(self) -> str:
        return f"an int in [{self.lo}, {self.hi}]"


class StrOption(Option):
    kind = "str"

    def _check(self, value):
        if not isinstance(value, str):
            raise self._bad(value, ConfigTypeError)
        return value

    def describe(self) -> str:
        return "a str or None"


class RegexOption(StrOption):
    def __init__(self, default: Optional[str], regex: str, example: str, doc: str = ""):
        self.regex, self.example = regex, example
        super().__init__(default, doc)

    def _check(self, value):
        value = super()._check(value)
        if not re.match(self.regex, value):
            raise ConfigError(
                f"Invalid value {value!r} for option '{self.name}': it must match "
                f"{self.regex!r}, for example {self.example!r}"
            )
        return value

    def describe(self) -> str:
        return f"a str matching {self.regex!r} (e.g. {self.example!r})"


class IntListOption(Option):
    kind = "list[int]"

    def __init__(self, default=None, doc: str = ""):
        super().__init__(default, doc)
        if self._raw is None:
            self._raw = []
            self._default = []

    def set(self, value):
        self._raw = [] if value is None else self._check(value)

    def _check(self, value):
        if not isinstance(value, (list, tuple)) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise self._bad(value, ConfigTypeError)
        return list(value)

    def describe(self) -> str:
        return "a list of ints"


class OpNameListOption(Option):
    """A list of operator names, each ``namespace.op`` or ``namespace.op.overload`` (the way
    ``str(torch.ops.aten.addmm.default)`` writes it: ``aten.addmm.default``); an op object
    (``torch.ops.aten.addmm``) is taken as its name. The ops need not exist in this process."""

    kind = "list[op name]"
    _FORMAT = re.compile(r"^[A-Za-z_]\w*\.[A-Za-z_]\w*(\.[A-Za-z_]\w*)?$")

    def set(self, value):
        self._raw = [] if value is None else self._check(value)

    def _check(self, value):
        if not isinstance(value, (list, tuple)):
            raise self._bad(value, ConfigTypeError)
        names = []
        for item in value:
            name = str(item) if type(item).__name__ in ("OpOverload", "OpOverloadPacket") \
                else item
            if not isinstance(name, str) or not self._FORMAT.match(name):
                raise ConfigError(
                    f"Invalid value {item!r} in option '{self.name}': an op name is "
                    f"'namespace.op' or 'namespace.op.overload', for example "
                    f"'aten.scaled_dot_product_attention' or "
                    f"'npu.npu_fused_infer_attention_score.default'")
            names.append(name)
        return names

    def describe(self) -> str:
        return "a list of op names ('namespace.op' or 'namespace.op.overload')"


class DictOption(Option):
    kind = "dict"

    def _check(self, value):
        if not isinstance(value, dict):
            raise self._bad(value, ConfigTypeError)
        return dict(value)

    def describe(self) -> str:
        return "a dict or None"


class CallableOption(Option):
    kind = "callable"

    def _check(self, value):
        if not callable(value):
            raise self._bad(value, ConfigTypeError)
        return value

    def describe(self) -> str:
        return "a callable or None"


class PoolHandleOption(Option):
    """A device graph memory pool handle: what ``torch.cuda.graph_pool_handle()`` (and
    ``torch.npu.graph_pool_handle()``) return, a tuple of two ints; or None."""

    kind = "pool handle"

    def _check(self, value):
        if (isinstance(value, tuple) and len(value) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
            return value
        raise self._bad(value, ConfigTypeError)

    def describe(self) -> str:
        return "None or a graph pool handle (a tuple of two ints, e.g. torch.cuda.graph_pool_handle())"


class PathOption(StrOption):
    """A path; ``must_exist`` = "dir" or "file" checks it on assignment. Stored absolute."""

    def __init__(self, default=None, must_exist: Optional[str] = None, suffix: str = "", doc=""):
        self.must_exist, self.suffix = must_exist, suffix
        super().__init__(default, doc)

    def _check(self, value):
        value = super()._check(value)
        if value == "":
            raise ConfigError(f"Invalid value '' for option '{self.name}': expected a path")
        if self.suffix and not value.endswith(self.suffix):
            raise ConfigError(f"Invalid value {value!r} for option '{self.name}': expected a "
                              f"{self.suffix} file")
        exists = {"dir": os.path.isdir, "file": os.path.isfile}.get(self.must_exist)
        if exists is not None and not exists(value):
            raise ConfigPathError(
                f"Option '{self.name}': {self.must_exist} {value!r} does not exist; create it "
                f"or choose another path"
            )
        return os.path.realpath(value)

    def describe(self) -> str:
        return {"dir": "an existing directory", "file": f"an existing {self.suffix or ''} file"
                }.get(self.must_exist, "a path")

