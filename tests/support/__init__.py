"""Helpers shared by the store's tests: task factories, invariant checks, a crash writer."""
