"""LMSP Desktop: a local LMSP service with a durable SQLite store and a Qt window onto it."""

__version__ = "0.1.0"
