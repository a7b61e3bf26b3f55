"""What every test module shares: the ``slow`` marker that ``python -m pytest -m "not slow"`` leaves out.

A test is slow when it drives a browser, runs a Jupyter kernel, or sits in one of the modules
below, each measured to take more than a few seconds (``python -m pytest --durations=40``).
CI runs every test; the marker only makes the quick loop while you work.
"""

from __future__ import annotations

import pytest

SLOW_MARKERS = ("browser", "notebook")
SLOW_MODULES: frozenset[str] = frozenset()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        module = item.path.name
        if module in SLOW_MODULES or any(item.get_closest_marker(m) for m in SLOW_MARKERS):
            item.add_marker(pytest.mark.slow)
