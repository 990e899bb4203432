"""Inference engines behind one small interface."""
