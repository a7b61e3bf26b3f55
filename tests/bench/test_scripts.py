"""Every benchmark script starts as docs/BENCHMARKS.md runs it: ``python bench/NAME.py --help`` from
the repository root, its imports (the tests' own kit among them) resolved."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p.name for p in (ROOT / "bench").glob("*.py"))


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_script_starts(name):
    r = subprocess.run([sys.executable, f"bench/{name}", "--help"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "usage:" in r.stdout
