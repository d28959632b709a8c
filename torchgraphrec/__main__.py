"""``python -m torchgraphrec``: the command line."""

import sys

from torchgraphrec.cli import main

if __name__ == "__main__":
    sys.exit(main())
