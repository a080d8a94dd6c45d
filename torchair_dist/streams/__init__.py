"""User streams and events in graph mode: tagged ops and the rewrite pass."""
