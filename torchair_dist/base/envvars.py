"""Every environment variable the library reads, validated where it is read.

Each reader names the variable and the values it accepts in its error (a
:class:`~torchair_dist.errors.ConfigError`), and reads lazily: ``import torchair_dist`` never
fails on a bad value; the first use of the variable does. :data:`VARIABLES` lists them all with
what they do (docs/reference/environment.md renders this table;
``tests/unit/test_torch_compat.py`` checks that the package names no other ``TORCHAIR_*`` variable).
"""
from __future__ import annotations

import os
from typing import Dict, Optional, Sequence

from ..errors import ConfigError

CPU_CAPTURE_ENV = "TORCHAIR_DIST_CPU_CAPTURE"  # read by the CPU wing, named by the pipeline's table

# name -> (accepted values, what it does)
VARIABLES: Dict[str, tuple] = {
    "TORCHAIR_DIST_PLATFORM": ("npu | cuda | cpu",
                               "force the platform (e.g. CPU on a GPU host); read on first use "
                               "and again after torch._dynamo.reset()"),
    "TORCHAIR_DIST_DISABLE_NPU": ("0 | 1", "1: do not probe torch_npu"),
    CPU_CAPTURE_ENV: ("record | emulate | off",
                                  "the CPU stand-in for a device graph (default record)"),
    "TORCHAIR_DIST_CPU_STREAM_ORDER": ("program | early | late | random:<seed>",
                                       "the order the CPU stand-ins run each stream's work in: "
                                       "program order (default), side streams as early or as "
                                       "late as the graph's events allow, or a seeded random "
                                       "order they allow; data edges alone do not order"),
    "TORCHAIR_DIST_CPU_PLACE": ("1 | 0", "0: the record stand-in re-issues every recorded op on "
                                "fresh memory instead of placing intermediates and views at "
                                "capture as a device graph does (default 1; for comparison)"),
    "TORCHAIR_DIST_CHECK_STREAM_ORDER": ("0 | 1", "1: check every compiled graph's cross-stream "
                                         "data edges for an ordering (as "
                                         "debug.check_stream_order)"),
    "TORCHAIR_DIST_SHM_SLOT_BYTES": ("an integer >= 64",
                                     "bytes per rank and bank of the shared-memory exchange "
                                     "(default 1048576; every rank must use the same)"),
    "TORCHAIR_DIST_SHM_TIMEOUT": ("a number of seconds > 0",
                                  "how long a shared-memory exchange waits for a peer "
                                  "(default: the process group's timeout)"),
    "TORCHAIR_DIST_GE_VALIDATE": ("0 | 1", "1: check every GE graph against the op registry, and "
                                  "every reference-kernel result dtype against the graph"),
    "TORCHAIR_DIST_GE_REGISTRY": ("a path to a file", "the GE op registry JSON to check against"),
    "TORCHAIR_DIST_LOG_LEVEL": ("DEBUG | INFO | WARNING | ERROR | CRITICAL",
                                "the torchair_dist logger's level (default WARNING)"),
    "TORCHAIR_DIST_BREAK_GRAPH_OPS": ("comma-separated dotted names",
                                      "force a graph break at each (debugging)"),
    "TORCHAIR_DIST_ALLOW_UNTESTED_TORCH": ("0 | 1", "1: a torch outside the tested range "
                                                    "warns instead of failing the import"),
    "TORCHAIR_CACHE_HOME": ("a directory", "where cache_compile keeps entries by default"),
}


def _fail(name: str, value: str, accepted: str) -> ConfigError:
    return ConfigError(f"environment variable {name}={value!r}: expected {accepted}")


def raw(name: str) -> Optional[str]:
    """The variable's value, None when unset or empty."""
    value = os.environ.get(name)
    return value if value else None


def env_flag(name: str, default: bool = False) -> bool:
    value = raw(name)
    if value is None:
        return default
    if value not in ("0", "1"):
        raise _fail(name, value, "0 or 1")
    return value == "1"


def env_choice(name: str, choices: Sequence[str], default: Optional[str] = None,
               normalise=lambda v: v) -> Optional[str]:
    value = raw(name)
    if value is None:
        return default
    if normalise(value) not in choices:
        raise _fail(name, value, "one of " + " | ".join(choices))
    return normalise(value)


def env_stream_order(name: str) -> tuple:
    """``program`` (default) | ``early`` | ``late`` | ``random:<seed>`` as (kind, seed)."""
    value = raw(name)
    if value is None:
        return ("program", None)
    kind, sep, seed = value.partition(":")
    if not sep and kind in ("program", "early", "late"):
        return (kind, None)
    if kind == "random" and sep:
        try:
            return ("random", int(seed, 0))
        except ValueError:
            pass
    raise _fail(name, value, "program | early | late | random:<integer seed>")


def env_int(name: str, default: int, minimum: Optional[int] = None) -> int:
    value = raw(name)
    if value is None:
        return default
    accepted = "an integer" + (f" >= {minimum}" if minimum is not None else "")
    try:
        number = int(value, 0)
    except ValueError:
        raise _fail(name, value, accepted) from None
    if minimum is not None and number < minimum:
        raise _fail(name, value, accepted)
    return number


def env_seconds(name: str, default: Optional[float] = None) -> Optional[float]:
    value = raw(name)
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        raise _fail(name, value, "a number of seconds > 0") from None
    if not number > 0 or number == float("inf"):
        raise _fail(name, value, "a number of seconds > 0")
    return number


START = "<!-- env-vars:start (generated by `make docs`; do not edit) -->"
END = "<!-- env-vars:end -->"


def render() -> str:
    """The table of the environment variables (docs/reference/environment.md)."""
    lines = [START, "", "| variable | accepts | what it does |", "|---|---|---|"]
    lines += [f"| `{name}` | {accepted.replace('|', chr(92) + '|')} | {doc} |"
              for name, (accepted, doc) in sorted(VARIABLES.items())]
    return "\n".join(lines + ["", END])
