"""``python -m bench ...`` is ``gateway bench ...`` (from the repository's root)."""

import sys

from gateway.cli import main

sys.exit(main(["bench", *sys.argv[1:]]))
