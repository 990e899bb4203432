"""Allows `python -m lmsp_desktop`."""

from lmsp_desktop.cli import main

raise SystemExit(main())
