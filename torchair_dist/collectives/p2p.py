"""send/recv preprocessing (placeholder; owned by the collectives work)."""


def preprocess_send_recv(gm, config):
    """Called by the backend entry on the Dynamo graph before AOT. Returns the graph."""
    return gm
