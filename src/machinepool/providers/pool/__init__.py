"""providers/pool."""
