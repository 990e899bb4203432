"""The Qt desktop window: a thin view over the core."""
