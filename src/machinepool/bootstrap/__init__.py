"""bootstrap."""
