"""``python -m attnscope``: the same program as the ``attnscope`` command."""

import sys

from .app.cli.main import main

sys.exit(main())
