"""``python -m torchgraphrec``: the command line."""

import sys

from torchgraphrec.cli import main

__all__: list[str] = []

if __name__ == "__main__":
    sys.exit(main())
