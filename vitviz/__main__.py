"""`python -m vitviz`: the `vitviz` command (vitviz/cli.py)."""

import sys

from vitviz.cli import main

sys.exit(main())
