"""The operator CLI (`model-router`)."""
