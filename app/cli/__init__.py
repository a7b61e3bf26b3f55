"""The ``attnscope`` command: :mod:`.main` parses and dispatches, one module per command
(:mod:`.serve`, :mod:`.inspect`, :mod:`.atlas`, :mod:`.export`, :mod:`.models`),
and :mod:`.common` holds the one-line errors and exit codes they share."""
