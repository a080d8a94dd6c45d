"""Debugging and documentation tools: dump files, the fx summary, the README's generated sections."""
