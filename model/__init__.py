"""The transformer, its tokenizer, corpus, training and inspection. Never imports ``app``."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("attnscope")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
