"""`python -m vitviz`: the `vitviz` command (vitviz/commands/cli.py)."""

import sys

from vitviz.commands.cli import main

sys.exit(main())
