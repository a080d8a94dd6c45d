"""Logging: one ``torchair_dist`` logger, level from ``TORCHAIR_DIST_LOG_LEVEL``, rank-prefixed."""
from __future__ import annotations

import logging
import os

LOGGER_NAME = "torchair_dist"
ENV_LEVEL = "TORCHAIR_DIST_LOG_LEVEL"
_initialised = False


class _RankFilter(logging.Filter):
    """Adds ``%(rank)s``: "[rank N] " inside a process group, "" outside."""

    def filter(self, record: logging.LogRecord) -> bool:
        rank = os.environ.get("RANK")
        try:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                rank = str(dist.get_rank())
        except Exception:  # logging must never fail
            pass
        record.rank = f"[rank {rank}] " if rank is not None else ""
        return True


class _FallbackHandler(logging.StreamHandler):
    """Prints torchair_dist records (rank-prefixed) only while the application has configured
    no root handler. Records always propagate: once the application sets up logging, its
    handlers get them and this one stays quiet, so nothing is printed twice."""

    def emit(self, record: logging.LogRecord) -> None:
        if logging.getLogger().handlers:
            return
        super().emit(record)


def init_logging() -> logging.Logger:
    """Configure the library logger once per process and return it."""
    global _initialised
    logger = logging.getLogger(LOGGER_NAME)
    if _initialised:
        return logger
    from .envvars import env_choice

    level_name = env_choice(ENV_LEVEL, ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
                            "WARNING", normalise=str.upper)
    _initialised = True
    logger.setLevel(logging.getLevelName(level_name))
    if not any(isinstance(h, _FallbackHandler) for h in logger.handlers):
        handler = _FallbackHandler()
        handler.addFilter(_RankFilter())
        handler.setFormatter(logging.Formatter("%(rank)s%(levelname)s torchair_dist: %(message)s"))
        logger.addHandler(handler)
    return logger
