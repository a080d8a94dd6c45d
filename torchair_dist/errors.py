"""The library's exception hierarchy.

Every error raised on purpose by torchair_dist subclasses :class:`TorchairDistError`, and its
message names the option, op, node or rank involved and says what the user can do about it.
Some also subclass the matching builtin (``ValueError``, ``TypeError``, ...) so code written for
TorchAir's behaviour keeps catching what it caught there.
"""


class TorchairDistError(Exception):
    """Base class of every error torchair_dist raises on purpose."""


class ConfigError(TorchairDistError, ValueError):
    """A config option or ``torch.compile(options=...)`` key is unknown or has a bad value."""


class ConfigTypeError(TorchairDistError, TypeError):
    """A config option was given a value of the wrong type."""


class ConfigPathError(TorchairDistError, FileNotFoundError):
    """A config option that must name an existing file or directory does not."""


class UnsupportedModeError(TorchairDistError, ValueError):
    """``CompilerConfig.mode`` names no backend."""


class BackendUnavailableError(TorchairDistError, RuntimeError):
    """The backend a mode dispatches to cannot run on this host (missing package or device)."""


class GraphValidationError(TorchairDistError, RuntimeError):
    """A captured graph breaks a rule the compiler relies on (e.g. unbalanced stream scopes)."""


class UnsupportedOpError(TorchairDistError, NotImplementedError):
    """A graph holds ops a backend cannot lower; the message lists all of them at once."""


class CollectiveCaptureError(TorchairDistError, RuntimeError):
    """A ``torch.distributed`` call cannot be captured into the graph."""


class CollectiveMismatchError(TorchairDistError, RuntimeError):
    """Ranks compiled different collective sequences; the message names the first divergence."""


class PeerFailedError(TorchairDistError, RuntimeError):
    """A peer rank failed while compiling a graph this rank shares collectives with; the message
    names the rank(s), where they failed and their error (ranks fail together)."""


class CollectiveFaultError(TorchairDistError, RuntimeError):
    """A collective of a compiled graph failed at run time (a peer died, stopped or timed out)."""


class WrongRankError(TorchairDistError, RuntimeError):
    """A compiled graph's runner holds one rank's state and was called on another rank (thread
    ranks sharing one compiled function); the message names both ranks and what to do."""


class CacheRejectedError(TorchairDistError, RuntimeError):
    """A compile-cache entry was refused (ownership, permissions, hash, version)."""


class HandleMismatchError(CacheRejectedError):
    """A backend was handed a handle that another backend (or another handle format of this
    one) wrote; the compile cache recompiles."""


class StreamApiError(TorchairDistError, ValueError):
    """A stream/event API was called with a bad tag or a duplicate tagged event."""


class GeRuntimeError(TorchairDistError, RuntimeError):
    """A GE graph cannot be loaded or run by its executor (the CANN runtime or the CPU
    reference executor)."""


class EagerOpError(TorchairDistError, RuntimeError):
    """An op of a compiled graph that eager refuses for these inputs (a matmul of two dtypes):
    raised when the compiled graph is called, as eager raises it, with eager's message."""


class NotCacheableError(TorchairDistError):
    """A compiled function cannot be stored in the compile cache (it still runs; nothing is
    saved); the message says what in it cannot be stored."""
