"""Stream/event rewrite pass (placeholder; owned by the streams work)."""


def rewrite_streams(gm, config):
    """Called by the backend entry on the Dynamo graph before AOT in ACL modes; returns gm."""
    return gm
