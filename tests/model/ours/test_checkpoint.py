"""Checkpoint directories: round trip, clear errors that name the file, device choice."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from attnscope.model.ours.checkpoint import CheckpointError, pick_device, save_checkpoint
from attnscope.model.registry import load_model


@pytest.fixture
def saved(model, tokenizer, tmp_path):
    path = save_checkpoint(model, tokenizer, tmp_path / "ckpt", training={"step": 7, "final": False})
    return path, model


def test_round_trip(saved, tokenizer):
    path, model = saved
    assert {p.name for p in path.iterdir()} == {"model.safetensors", "config.json", "tokenizer.json", "training.json"}
    loaded = load_model(path, device="cpu")
    assert loaded.config == model.config
    assert loaded.training == {"step": 7, "final": False}
    assert loaded.path == path and loaded.device == torch.device("cpu")
    assert not loaded.model.training
    assert loaded.model.lm_head.weight is loaded.model.transformer.wte.weight
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[key], value), key
    assert loaded.tokenizer.encode("The cat sat.") == tokenizer.encode("The cat sat.")


def test_missing_directory(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(CheckpointError, match="nowhere"):
        load_model(missing)


@pytest.mark.parametrize("name", ["config.json", "model.safetensors", "tokenizer.json"])
def test_missing_file_is_named(saved, name):
    path, _ = saved
    (path / name).unlink()
    with pytest.raises(CheckpointError, match=name.replace(".", r"\.")):
        load_model(path)


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("model.safetensors", b"\x08\x00\x00\x00\x00\x00\x00\x00not json"),
        ("model.safetensors", b"garbage"),
        ("tokenizer.json", b"{not json"),
        ("config.json", b"{not json"),
        ("config.json", b'{"n_embd": 30, "n_head": 4}'),  # not divisible
    ],
)
def test_corrupt_file_is_named(saved, name, content):
    path, _ = saved
    (path / name).write_bytes(content)
    with pytest.raises(CheckpointError, match=name.replace(".", r"\.")):
        load_model(path)


def test_weights_that_do_not_fit_the_config(saved):
    path, model = saved
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "n_layer": config["n_layer"] + 1}))
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load_model(path)


def test_unreadable_training_json_is_ignored(saved):
    path, _ = saved
    (path / "training.json").write_text("{oops")
    assert load_model(path).training == {}


def test_pick_device_falls_back_to_cpu_with_a_warning(monkeypatch, caplog):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("ATTNSCOPE_DEVICE", raising=False)
    with caplog.at_level(logging.WARNING, logger="model.checkpoint"):
        assert pick_device("cuda") == torch.device("cpu")
        assert pick_device("cuda:0") == torch.device("cpu")
    assert sum("CUDA" in r.getMessage() for r in caplog.records) == 2
    assert pick_device(None) == torch.device("cpu")
    assert pick_device("auto") == torch.device("cpu")
    assert pick_device("cpu") == torch.device("cpu")


def test_pick_device_reads_the_environment(monkeypatch, caplog):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("ATTNSCOPE_DEVICE", "cuda")
    with caplog.at_level(logging.WARNING, logger="model.checkpoint"):
        assert pick_device() == torch.device("cpu")
    assert any("CUDA" in r.getMessage() for r in caplog.records)


def test_pick_device_prefers_cuda_when_present(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("ATTNSCOPE_DEVICE", raising=False)
    assert pick_device() == torch.device("cuda")
    assert pick_device("cuda") == torch.device("cuda")
    assert pick_device("cpu") == torch.device("cpu")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_load_onto_the_gpu(saved):
    path, model = saved
    loaded = load_model(path, device="cuda")
    assert next(loaded.model.parameters()).device.type == "cuda"
    idx = torch.randint(0, model.config.vocab_size, (1, 16))
    with torch.no_grad():
        expected, _ = model(idx)
        got, _ = loaded.model(idx.cuda())
    assert (got.cpu() - expected).abs().max().item() <= 1e-4
