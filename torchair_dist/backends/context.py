"""Re-exports the ground-floor ``GraphContext`` (torchair_dist.graph_context) for backends."""
from ..graph_context import GraphContext, Runner, boxed, current_rank_and_world  # noqa: F401
