"""`workbench` console script and `python -m workbench`."""

import sys

from workbench.cli import main

if __name__ == "__main__":
    sys.exit(main())
