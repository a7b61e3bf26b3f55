"""``python -m app``: the ``attnscope`` command line."""

import sys

from .cli import main

sys.exit(main())
