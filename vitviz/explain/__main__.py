"""`python -m vitviz.explain`: the batch CLI (vitviz/explain_cli.py)."""

import sys

from vitviz.explain_cli import main

sys.exit(main())
