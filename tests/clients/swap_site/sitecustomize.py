"""Loaded at start-up by every Python process of a swapped run (the runner puts this folder on
PYTHONPATH): installs the backend swap of ``tests/clients/backend_swap.py`` when
``TORCHAIR_DIST_SWAP_MODE`` names a mode, so the ranks a test spawns compile with ours too."""
import os
import sys

if os.environ.get("TORCHAIR_DIST_SWAP_MODE"):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import backend_swap

    backend_swap.install_from_env()
