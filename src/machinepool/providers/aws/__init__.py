"""providers/aws."""
