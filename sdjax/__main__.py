"""``python -m sdjax``: see :mod:`sdjax.cli`."""

import sys

from sdjax.cli import main

sys.exit(main())
