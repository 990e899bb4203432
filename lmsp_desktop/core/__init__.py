"""Core of LMSP Desktop: store, runtime and service. Never imports Qt."""
