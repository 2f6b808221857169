"""providers/sim."""
