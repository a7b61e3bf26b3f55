"""What every test module shares: the ``slow`` marker that ``python -m pytest -m "not slow"`` leaves out.

A test is slow when it drives a browser, runs a Jupyter kernel, or sits in one of the modules
below, measured (``python -m pytest --durations=60``, 2026-11-26) to take several seconds a test.
CI runs every test; the marker only makes the quick loop while you work.
"""

from __future__ import annotations

from pathlib import Path

import pytest

SLOW_MARKERS = ("browser", "notebook")
SLOW_MODULES = frozenset(
    {
        "model/atlas/test_ray_engine.py",  # starts a local Ray, twice
        "model/jlens/test_ray_engine.py",  # starts a local Ray
        "app/schemas/test_openapi.py",  # schemathesis over every route
        "test_package.py",  # builds and installs a wheel
        "app/cli/test_main.py",  # real processes of the command
        "app/cli/test_models.py",
        "app/routes/test_attention_long.py",  # texts of thousands of tokens
        "bench/test_scripts.py",  # a Python process per benchmark script
    }
)
TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        module = item.path.resolve().relative_to(TESTS).as_posix()
        if module in SLOW_MODULES or any(item.get_closest_marker(m) for m in SLOW_MARKERS):
            item.add_marker(pytest.mark.slow)
