"""``python -m rlframe``: the ``rlframe`` command line."""
import sys

from rlframe.cli import main

if __name__ == "__main__":
    sys.exit(main())
