"""The head atlas: every head measured over a whole corpus (docs/ATLAS.md).

:mod:`.build` runs it (:func:`~.build.atlas`), :mod:`.corpus` reads and cuts the corpus,
:mod:`.tally` reduces one batch, :mod:`.metrics` defines the metrics and the host's tally of them,
:mod:`.stats` sums them on the device, :mod:`.text` cuts an exemplar's context, :mod:`.read`
writes and reads the files, :mod:`.meta` says what an atlas is of and keeps an interrupted run's state,
:mod:`.ray_engine` runs the batches on Ray.
"""
