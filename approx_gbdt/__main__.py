"""``python -m approx_gbdt``: the ``approx-gbdt`` command."""

import sys

from approx_gbdt.cli import main

if __name__ == "__main__":
    sys.exit(main())
