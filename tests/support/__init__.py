"""The one home of the tests' helpers.

polling (`until`: the one way to wait for a condition) · lifecycle (`started`: a Runner or Core
for the length of a block) · store_helpers (task factories, store invariants) · crash_writer
(the writer process the crash test kills) · dbcheck (invariants read from the SQLite file) ·
fake_core (a real Core with the scripted engine) · fuzz (schemathesis against a running Core) ·
races (cancel/complete races) · fake_upstream (a scripted OpenAI-compatible upstream) ·
gui_core (the window's fake core).
"""
