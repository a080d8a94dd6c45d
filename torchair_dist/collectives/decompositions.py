"""Default decompositions of collectives (placeholder; owned by the collectives work)."""


def default_decompositions():
    """The default decomposition table merged first by get_npu_backend."""
    return {}
