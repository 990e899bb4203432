"""The LMSP HTTP service on aiohttp."""
