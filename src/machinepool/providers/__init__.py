"""providers."""
