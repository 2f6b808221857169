"""controllers/machinepool."""
