"""The SQLite store of LMSP chapter 11."""
