"""`python -m lmsp_desktop.core.engines.worker FD`: an engine worker (see main.py)."""

import sys

if __name__ == "__main__":
    from lmsp_desktop.core.engines.worker.main import main

    sys.exit(main(sys.argv[1:]))
