"""Remaps of torch.distributed calls to traceable ops (placeholder; owned by the collectives work)."""


def install():
    """Install the remap table into Dynamo. Idempotent. Called at ``import torchair_dist``."""
