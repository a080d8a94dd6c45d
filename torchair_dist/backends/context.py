"""Re-exports the ground-floor ``GraphContext`` (torchair_dist.pipeline.graph_context) for backends."""
from ..pipeline.graph_context import (  # noqa: F401
    Backend, GraphContext, Runner, boxed, current_rank_and_world)
