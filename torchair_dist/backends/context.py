"""Re-exports the ground-floor ``GraphContext`` (torchair_dist.base.graph_context) for backends;
the backend interface itself is :mod:`.interface`."""
from ..base.graph_context import (  # noqa: F401
    GraphContext, Runner, boxed, current_rank_and_world, own_copy)
