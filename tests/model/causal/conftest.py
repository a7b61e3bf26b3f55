"""What the decomposition tests share: the kit's models (tests/kit/decompositions.py), each loaded by
attnscope and by transformers (the oracle)."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from attnscope.model.registry import load_model  # noqa: E402

from tests.kit.decompositions import model_dirs, oracle  # noqa: E402


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    return model_dirs(tmp_path_factory.mktemp("decomp"))


@pytest.fixture(scope="module")
def loaded(family_dirs):
    return {name: load_model(path, "cpu") for name, path in family_dirs.items()}


@pytest.fixture(scope="module")
def oracles(family_dirs):
    return {name: oracle(path) for name, path in family_dirs.items()}
