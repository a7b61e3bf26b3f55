"""Training: the tiny preset learns a generated text in seconds, saves, and resumes."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from attnscope.model.ours.evaluate import stream_loss
from attnscope.model.ours.gpt import GPT
from attnscope.model.ours.train import get_batch, main, prepare, train
from attnscope.model.ours.train_config import PRESETS, lr_at
from attnscope.model.registry import load_model


@pytest.fixture
def tiny(corpus_dir, tmp_path):
    return replace(PRESETS["tiny"], corpus=str(corpus_dir), out=str(tmp_path / "run"))


def test_tiny_preset_learns_and_writes_a_loadable_checkpoint(tiny):
    tok, _, val, _ = prepare(tiny)
    torch.manual_seed(tiny.seed)
    untrained = GPT(replace(tiny.model, vocab_size=tok.vocab_size))
    loss_before = stream_loss(untrained, val, n_windows=tiny.eval_windows)
    assert loss_before == pytest.approx(math.log(tok.vocab_size), abs=0.1)  # uniform guess at init

    final = train(tiny)
    assert final["step"] == tiny.max_steps
    assert final["val_loss"] < loss_before - 1.0  # measured: ≈ 5.7 -> ≈ 4.0 nats in 60 steps

    loaded = load_model(f"{tiny.out}/checkpoint", device="cpu")
    assert loaded.training["step"] == tiny.max_steps and loaded.training["final"] is True
    assert [h["step"] for h in loaded.training["history"]] == [30, 60]
    assert loaded.training["tokens_seen"] == tiny.max_steps * tiny.batch_size * tiny.model.block_size
    # the saved weights are the ones that scored the reported loss
    assert stream_loss(loaded.model, val, n_windows=tiny.eval_windows) == pytest.approx(final["val_loss"], abs=1e-3)
    metrics = (Path(tiny.out) / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(m)["step"] for m in metrics] == [30, 60]


def test_resume_continues_from_the_saved_step(tiny, capsys):
    # first run: stops at step 30 (through the command line, as a user would run it); on the CPU
    # whatever the machine has, so that the batch size is the preset's (a GPU's default is 64)
    main(["--preset", "tiny", "--corpus", tiny.corpus, "--out", tiny.out, "--max-steps", "30", "--device", "cpu"])
    first = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert first["step"] == 30
    state = torch.load(f"{tiny.out}/train_state.pt", weights_only=False)
    assert state["step"] == 30

    final = train(replace(tiny, max_steps=60), resume=True)
    assert final["step"] == 60
    training = load_model(f"{tiny.out}/checkpoint").training
    history = training["history"]
    assert [h["step"] for h in history] == [30, 60]
    assert history[0] == first  # the first 30 steps were kept, not redone
    assert training["tokens_seen"] == 60 * tiny.batch_size * tiny.model.block_size


def test_lr_schedule(tiny):
    cfg = replace(tiny, lr=1e-3, min_lr=1e-4, warmup_steps=10, max_steps=100)
    warmup = [lr_at(s, cfg) for s in range(10)]
    assert warmup == sorted(warmup) and warmup[0] == pytest.approx(1e-4) and warmup[-1] == pytest.approx(1e-3)
    decay = [lr_at(s, cfg) for s in range(10, 101)]
    assert decay == sorted(decay, reverse=True)
    assert decay[0] == pytest.approx(1e-3) and decay[-1] == pytest.approx(1e-4)
    assert lr_at(1000, cfg) == pytest.approx(1e-4)


def test_a_new_phase_restarts_warmup_and_cosine_at_its_start(tiny):
    first = replace(tiny, lr=1e-3, min_lr=1e-4, warmup_steps=10, max_steps=100)
    second = replace(first, lr=5e-4, phase_start=100, max_steps=200)
    # the same shape, shifted by the phase start and scaled to the new peak
    for s in range(10):  # linear warm-up from 0
        assert lr_at(100 + s, second) == pytest.approx(lr_at(s, first) / 2)
    for s in range(10, 101):  # cosine from the peak down to min_lr
        assert (lr_at(100 + s, second) - 1e-4) / 4e-4 == pytest.approx((lr_at(s, first) - 1e-4) / 9e-4)
    assert lr_at(200, second) == pytest.approx(1e-4)


def test_resume_with_a_new_phase_trains_on_and_a_plain_resume_keeps_its_schedule(tiny, capsys):
    main(["--preset", "tiny", "--corpus", tiny.corpus, "--out", tiny.out, "--max-steps", "30"])
    capsys.readouterr()
    base = ["--preset", "tiny", "--corpus", tiny.corpus, "--out", tiny.out]
    main([*base, "--resume", "--new-phase", "--max-steps", "40", "--lr", "1e-3"])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["step"] == 40
    state = torch.load(f"{tiny.out}/train_state.pt", weights_only=False)
    assert state["schedule"] == {
        "lr": 1e-3,
        "min_lr": tiny.min_lr,
        "warmup_steps": tiny.warmup_steps,
        "max_steps": 40,
        "phase_start": 30,
    }
    # a plain --resume with a longer run keeps the phase's peak and start, not the preset's
    main([*base, "--resume", "--max-steps", "60"])
    state = torch.load(f"{tiny.out}/train_state.pt", weights_only=False)
    assert state["step"] == 60
    assert state["schedule"] == {**state["schedule"], "lr": 1e-3, "phase_start": 30, "max_steps": 60}


def test_copy_span_shares_from_the_command_line_reach_the_run(tiny, capsys):
    """--repeat-frac and --random-span-frac are the run's settings, saved with its checkpoint."""
    shares = {"repeat_frac": 0.3, "random_span_frac": 0.7}
    assert all(getattr(tiny, k) != v for k, v in shares.items())  # not the preset's own
    base = ["--preset", "tiny", "--corpus", tiny.corpus, "--out", tiny.out, "--max-steps", "30", "--device", "cpu"]
    main([*base, "--repeat-frac", "0.3", "--random-span-frac", "0.7"])
    capsys.readouterr()
    saved = load_model(f"{tiny.out}/checkpoint").training["train_config"]
    assert {k: saved[k] for k in shares} == shares
    assert saved["max_steps"] == 30 and saved["batch_size"] == tiny.batch_size


@pytest.mark.parametrize(
    "args, message",
    [
        (["--new-phase"], "needs --resume"),
        (["--resume", "--new-phase", "--max-steps", "20"], "no "),  # nothing saved yet
    ],
)
def test_refused_new_phases(tiny, capsys, args, message):
    with pytest.raises(SystemExit):
        main(["--preset", "tiny", "--corpus", tiny.corpus, "--out", tiny.out, *args])
    assert message in capsys.readouterr().err


def test_resuming_a_finished_run_without_more_steps_is_refused(tiny, capsys):
    main(["--preset", "tiny", "--corpus", tiny.corpus, "--out", tiny.out, "--max-steps", "30"])
    with pytest.raises(SystemExit):
        main(
            [
                "--preset",
                "tiny",
                "--corpus",
                tiny.corpus,
                "--out",
                tiny.out,
                "--resume",
                "--new-phase",
                "--max-steps",
                "30",
            ]
        )
    assert "above" in capsys.readouterr().err


def test_snapshots_keep_every_evaluated_checkpoint(tiny):
    train(replace(tiny, keep_snapshots=True))
    snapshots = sorted(p.name for p in (Path(tiny.out) / "snapshots").iterdir())
    assert snapshots == ["step-000030", "step-000060"]
    assert load_model(Path(tiny.out) / "snapshots" / "step-000030").training["step"] == 30


def has_repeat(row: np.ndarray, min_len: int = 8) -> bool:
    """True when some span of ``min_len`` tokens appears twice, later copy after the first ends."""
    n = len(row)
    for src in range(n - 2 * min_len + 1):
        span = row[src : src + min_len]
        for dst in range(src + min_len, n - min_len + 1):
            if np.array_equal(row[dst : dst + min_len], span):
                return True
    return False


def test_batches_are_shifted_windows_with_repeated_spans(tiny):
    data = np.random.default_rng(0).integers(0, 300, size=5000).astype(np.uint16)  # no repeats of its own
    x, y = get_batch(data, replace(tiny, repeat_frac=1.0), np.random.default_rng(1))
    B, T = tiny.batch_size, tiny.model.block_size
    assert x.shape == y.shape == (B, T) and x.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the next tokens
    windows = torch.cat([x, y[:, -1:]], dim=1).numpy()
    assert all(has_repeat(w) for w in windows)

    x0, _ = get_batch(data, replace(tiny, repeat_frac=0.0), np.random.default_rng(1))
    assert not any(has_repeat(w) for w in x0.numpy())
    # seeded
    x1, _ = get_batch(data, replace(tiny, repeat_frac=1.0), np.random.default_rng(1))
    assert torch.equal(x, x1)


def test_cuda_asked_for_without_a_gpu_is_one_line_and_exit_1(tiny, monkeypatch, capsys):
    """What was typed is what runs: no quiet fall back to hours of CPU training."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as info:
        main(
            ["--preset", "tiny", "--corpus", tiny.corpus, "--out", tiny.out, "--device", "cuda"],
            prog="attnscope train",
        )
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--device cuda" in err and "CUDA is not available" in err
    assert not Path(tiny.out).exists()
