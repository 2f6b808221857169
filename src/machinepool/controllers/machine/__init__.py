"""controllers/machine."""
