"""Shared helpers for the reliability and security proofs (crash loop, races, faults)."""
