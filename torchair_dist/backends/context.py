"""Re-exports the ground-floor ``GraphContext`` (torchair_dist.base.graph_context) for backends."""
from ..base.graph_context import (  # noqa: F401
    Backend, Build, Compiled, GraphContext, Runner, boxed, current_rank_and_world, own_copy)
