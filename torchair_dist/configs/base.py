"""The base of every config class: fixed attributes, validated assignment, value equality."""
from __future__ import annotations

import copy
from typing import Any, Dict, Iterator, List, Tuple

from ..errors import ConfigError
from .option import Option, writes


class ConfigBase:
    """A tree of :class:`Option` leaves and sub-configs.

    Subclasses create their options and sub-configs in ``__init__`` and end it with
    ``self._freeze()``. After that, assigning an unknown attribute raises ``ConfigError`` listing
    the valid names, assigning an option validates the value, and sub-configs cannot be replaced.
    Every instance owns its own option objects, so two configs never share state.
    """

    _frozen = False

    def _freeze(self, prefix: str = "") -> None:
        for name, item in self._items():
            path = f"{prefix}{name}"
            if isinstance(item, Option):
                item.name = path
            else:
                item._freeze(path + ".")
        object.__setattr__(self, "_frozen", True)

    def _items(self) -> Iterator[Tuple[str, Any]]:
        for name, item in vars(self).items():
            if isinstance(item, (Option, ConfigBase)):
                yield name, item

    def __setattr__(self, key: str, value: Any) -> None:
        if not self._frozen:
            object.__setattr__(self, key, value)
            return
        current = vars(self).get(key)
        if isinstance(current, Option):
            current.set(value)
            return
        valid = sorted(name for name, _ in self._items())
        if isinstance(current, ConfigBase):
            raise ConfigError(
                f"{type(self).__name__}.{key} is a group of options and cannot be replaced; "
                f"set its options instead (e.g. config.{key}.<option> = value)"
            )
        raise ConfigError(f"{type(self).__name__} has no option {key!r}, all options {valid}")

    def leaves(self, prefix: str = "") -> Iterator[Tuple[str, Option]]:
        """Every option below this config as (dotted path, Option), in definition order."""
        for name, item in self._items():
            if isinstance(item, Option):
                yield f"{prefix}{name}", item
            else:
                yield from item.leaves(f"{prefix}{name}.")

    def as_dict(self) -> Dict[str, Any]:
        """{dotted path: typed value} of every option."""
        return {path: opt._raw for path, opt in self.leaves()}

    def changed(self) -> Dict[str, Any]:
        """{dotted path: typed value} of the options that differ from their defaults."""
        return {path: opt._raw for path, opt in self.leaves() if opt.is_set()}

    def option(self, path: str) -> Option:
        """The Option at a dotted path such as ``"debug.aclgraph.clone_input"``."""
        node: Any = self
        for part in path.split("."):
            node = vars(node).get(part) if isinstance(node, ConfigBase) else None
            if node is None:
                raise ConfigError(f"{type(self).__name__} has no option {path!r}")
        if not isinstance(node, Option):
            raise ConfigError(f"{path!r} is a group of options, not an option")
        return node

    def get(self, path: str) -> Any:
        """The typed value at a dotted path: how library code reads an option (the read is
        tracked: ``tests/unit/test_option_honesty.py`` compares reads with the pipeline's
        declared reads)."""
        return self.option(path).raw

    def peek(self, path: str) -> Any:
        """The value at a dotted path without counting as a read: for the pipeline's own
        bookkeeping (which stages run, which options take effect), never for using it."""
        return self.option(path)._raw

    def revision(self) -> Tuple[int, List[Tuple[Option, Any]]]:
        """A cheap mark of this config's values now, for :meth:`unchanged_since`: the
        process's count of option assignments and a copy of every list/dict/set value (those
        can change in place, without an assignment)."""
        return writes(), [(opt, copy.deepcopy(opt._raw)) for _, opt in self.leaves()
                          if isinstance(opt._raw, (list, dict, set))]

    def unchanged_since(self, revision: Tuple[int, List[Tuple[Option, Any]]]) -> bool:
        """Whether no option was assigned (in any config) and no container value changed in
        place since ``revision`` was taken: a cached description of this config still holds.
        About a microsecond: a backend's equality asks on every call Dynamo compares it."""
        count, containers = revision
        return count == writes() and all(opt._raw == value for opt, value in containers)

    def __eq__(self, other: object) -> bool:
        if type(self) is not type(other):
            return NotImplemented
        return list(self.leaves()) == list(other.leaves())  # type: ignore[union-attr]

    __hash__ = None  # mutable

    def __repr__(self) -> str:
        changed = ", ".join(f"{k}={v!r}" for k, v in self.changed().items())
        return f"{type(self).__name__}({changed})"
