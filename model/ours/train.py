"""Train the model: ``attnscope train`` or ``python -m attnscope.model.ours.train --preset small``.

* tokenizer trained on the corpus (once, then reused from the run directory);
* windows of ``block_size + 1`` tokens cut at random places of the token stream, so a
  window crosses document boundaries the way GPT-2's did (``<|endoftext|>`` between documents);
* in ``repeat_frac`` of the windows a span of 8–40 tokens is copied further along the same
  window (some spans are random tokens): predicting the copy is what grows induction heads;
* AdamW, linear warm-up then cosine decay, gradient clipping, fixed seed;
* every ``eval_every`` steps: held-out loss, bits per byte on held-out sentences, and the
  best previous-token and induction head scores; a checkpoint and the optimizer state are
  saved so an interrupted run resumes where it stopped (``--resume``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from ..heads import ROLES, head_role_scores
from ..precision import tf32_for_training
from .checkpoint import save_checkpoint
from .corpus import read_documents
from .evaluate import LN2, bits_per_byte, sentence_nll, stream_loss
from .gpt import GPT
from .tokenizer import BPETokenizer
from .train_args import train_parser
from .train_config import PRESETS, SCHEDULE, TrainConfig, lr_at


class ResumeError(Exception):
    """The saved run cannot be continued as asked."""


def tokenize_split(tok: BPETokenizer, docs: list[str]) -> np.ndarray:
    ids: list[int] = []
    for d in tok.encode_batch_ids(docs):
        ids.extend(d)
        ids.append(tok.eot_id)
    return np.array(ids, dtype=np.uint16)


def get_batch(data: np.ndarray, cfg: TrainConfig, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    T, B = cfg.model.block_size, cfg.batch_size
    starts = rng.integers(0, len(data) - T - 1, size=B)
    w = np.stack([data[s : s + T + 1] for s in starts]).astype(np.int64)  # (B, T+1)
    for row in w:
        if rng.random() < cfg.repeat_frac:
            L = int(rng.integers(8, min(41, (T + 1) // 3)))
            src = int(rng.integers(0, T + 1 - 2 * L))
            dst = int(rng.integers(src + L, T + 2 - L))
            if rng.random() < cfg.random_span_frac:
                row[src : src + L] = rng.integers(256, cfg.model.vocab_size, size=L)
            row[dst : dst + L] = row[src : src + L]
    w = torch.from_numpy(w)
    return w[:, :-1].contiguous(), w[:, 1:].contiguous()  # (B, T) inputs, (B, T) targets


def prepare(cfg: TrainConfig) -> tuple[BPETokenizer, np.ndarray, np.ndarray, list[str]]:
    corpus, out = Path(cfg.corpus), Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    train_docs = read_documents(corpus / "train.txt")
    val_docs = read_documents(corpus / "val.txt")
    tok_file = out / "tokenizer.json"
    if tok_file.exists():
        tok = BPETokenizer.load(tok_file)
    else:
        tok = BPETokenizer.train(train_docs, vocab_size=cfg.vocab_size)
        tok.save(tok_file)
    cache = out / "tokens.npz"
    if cache.exists():
        z = np.load(cache)
        train, val = z["train"], z["val"]
    else:
        train, val = tokenize_split(tok, train_docs), tokenize_split(tok, val_docs)
        np.savez(cache, train=train, val=val)
    sentences_file = corpus / "sentences_val.txt"
    sentences = [s for s in sentences_file.read_text().splitlines() if s.strip()] if sentences_file.exists() else []
    return tok, train, val, sentences[: cfg.eval_sentences]


def evaluate(model: GPT, tok: BPETokenizer, val: np.ndarray, sentences: list[str], cfg: TrainConfig) -> dict:
    m = {"val_loss": round(stream_loss(model, val, n_windows=cfg.eval_windows), 4)}
    if sentences:
        nats, _, nbytes = sentence_nll(model, tok, sentences)
        m["sentence_bpb"] = round(bits_per_byte(nats, nbytes), 4)
    roles = head_role_scores(model, tok)  # (L, nh, 4)
    for r, name in enumerate(ROLES[:3]):
        m[f"best_{name}"] = round(float(roles[..., r].max()), 3)
    return m


def _to_device(t: torch.Tensor, device: str) -> torch.Tensor:
    """A batch to the device; on CUDA from pinned memory, without waiting for the copy."""
    if torch.device(device).type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def _autocast(device: str):
    """bf16 autocast on CUDA (weights and optimizer stay fp32); nothing on the CPU."""
    if torch.device(device).type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def setup_device(device: str, strict: bool = False) -> str:
    """``auto`` -> CUDA when present, else CPU; ``strict`` (the command line): CUDA asked for on
    a machine without it is a :class:`~model.ours.checkpoint.CheckpointError`, not a quiet run on the
    CPU. (TF32 is turned on by :func:`train` for its own loop only, never left on for the
    process: see :mod:`model.precision`.)"""
    from .checkpoint import pick_device

    return str(pick_device(device, strict=strict))


CUDA_BATCH_SIZE = 64  # the default on a GPU: 64 × 256 tokens keeps an H100 busy with this model


def train(cfg: TrainConfig, resume: bool = False, device: str = "cpu", new_phase: bool = False) -> dict:
    """Train (or resume) a run; on CUDA with TF32 matmuls inside this call only."""
    with tf32_for_training(device):
        return _train(cfg, resume=resume, device=device, new_phase=new_phase)


@dataclass
class _Run:
    """What a training run carries from step to step, and saves to resume from."""

    step: int = 0
    history: list = field(default_factory=list)
    tokens_seen: int = 0
    elapsed: float = 0.0  # seconds of training so far, over every resumed session


def _optimizer(model: GPT, cfg: TrainConfig) -> torch.optim.AdamW:
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(0.9, 0.95),
    )


def _resume(cfg: TrainConfig, model: GPT, opt, state_file: Path, new_phase: bool) -> tuple[TrainConfig, _Run]:
    """The saved run in ``state_file`` loaded into ``model`` and ``opt``; its schedule's phase kept, or a new
    phase started at the resumed step."""
    st = torch.load(state_file, map_location="cpu", weights_only=False)  # saved on any device
    model.load_state_dict(st["model"])
    opt.load_state_dict(st["optimizer"])
    run = _Run(st["step"], st["history"], st["tokens_seen"], st.get("elapsed", 0.0))
    saved_start = st.get("schedule", {}).get("phase_start", st.get("phase_start", 0))
    cfg = replace(cfg, phase_start=run.step if new_phase else saved_start)
    if cfg.max_steps <= run.step:
        raise ResumeError(f"the run in {cfg.out} is at step {run.step}: to train it on, give --max-steps above that")
    return cfg, run


def _save(cfg: TrainConfig, model: GPT, opt, tok: BPETokenizer, run: _Run, corpus_tokens: dict, final: bool) -> None:
    """The checkpoint (and a snapshot of it), the optimizer state to resume from, and the metrics so far."""
    out = Path(cfg.out)
    training = {
        "train_config": {k: v for k, v in asdict(cfg).items() if k != "model"},
        "step": run.step,
        "tokens_seen": run.tokens_seen,
        "train_minutes": round(run.elapsed / 60, 1),
        "parameters": model.num_parameters(),
        "corpus_tokens": corpus_tokens,
        "history": run.history,
        "final": final,
    }
    save_checkpoint(model, tok, out / "checkpoint", training)
    if cfg.keep_snapshots:
        save_checkpoint(model, tok, out / "snapshots" / f"step-{run.step:06d}", training)
    schedule = {k: getattr(cfg, k) for k in SCHEDULE}
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "schedule": schedule}
    torch.save(state | asdict(run), out / "train_state.pt")
    (out / "metrics.jsonl").write_text("".join(json.dumps(h) + "\n" for h in run.history))


def _train(cfg: TrainConfig, resume: bool, device: str, new_phase: bool) -> dict:
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    tok, train_data, val_data, sentences = prepare(cfg)
    val_bytes_per_token = bytes_per_token(tok, val_data)
    cfg = replace(cfg, model=replace(cfg.model, vocab_size=tok.vocab_size))
    model = GPT(cfg.model).to(device)
    opt = _optimizer(model, cfg)
    run = _Run()
    state_file = Path(cfg.out) / "train_state.pt"
    if new_phase and not (resume and state_file.exists()):
        raise ResumeError(f"a new phase continues a saved run, and there is no {state_file}")
    if resume and state_file.exists():
        cfg, run = _resume(cfg, model, opt, state_file, new_phase)
        rng = np.random.default_rng(cfg.seed + run.step)  # a fresh but reproducible stream after resuming
        torch.manual_seed(cfg.seed + run.step)
    corpus_tokens = {"train": int(len(train_data)), "val": int(len(val_data))}

    model.train()
    t_start = time.time() - run.elapsed
    bar = tqdm(total=cfg.max_steps, initial=run.step, unit="step", dynamic_ncols=True, mininterval=2.0)
    tok_per_step = cfg.batch_size * cfg.model.block_size
    window_t, window_tokens = time.time(), 0
    loss_ema = None
    while run.step < cfg.max_steps:
        for g in opt.param_groups:
            g["lr"] = lr_at(run.step, cfg)
        x, y = get_batch(train_data, cfg, rng)
        x, y = _to_device(x, device), _to_device(y, device)
        with _autocast(device):
            _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        run.step += 1
        run.tokens_seen += tok_per_step
        window_tokens += tok_per_step
        loss_ema = loss.item() if loss_ema is None else 0.98 * loss_ema + 0.02 * loss.item()
        run.elapsed = time.time() - t_start
        bar.update(1)
        if run.step % 10 == 0:
            rate = window_tokens / max(1e-6, time.time() - window_t)
            window_t, window_tokens = time.time(), 0
            bar.set_postfix(loss=f"{loss_ema:.3f}", tok_s=f"{rate:,.0f}", lr=f"{lr_at(run.step, cfg):.1e}")
        out_of_time = cfg.max_minutes and run.elapsed > cfg.max_minutes * 60
        if run.step % cfg.eval_every == 0 or run.step == cfg.max_steps or out_of_time:
            m = evaluate(model, tok, val_data, sentences, cfg)
            minutes = round(run.elapsed / 60, 2)
            m.update(step=run.step, tokens=run.tokens_seen, minutes=minutes, train_loss=round(loss_ema, 4))
            m["val_bpb_stream"] = round(m["val_loss"] / LN2 / val_bytes_per_token, 4)
            run.history.append(m)
            tqdm.write(json.dumps(m))
            _save(cfg, model, opt, tok, run, corpus_tokens, final=run.step >= cfg.max_steps)
            if out_of_time:
                tqdm.write(f"stopping after {cfg.max_minutes} minutes at step {run.step}; resume with --resume")
                break
    bar.close()
    return run.history[-1] if run.history else {}


def bytes_per_token(tok: BPETokenizer, ids: np.ndarray, sample: int = 200_000) -> float:
    """Mean UTF-8 bytes per token over the first ``sample`` ids: turns nats/token into bits/byte."""
    head = ids[:sample]
    return sum(len(tok.token_bytes(int(i))) for i in head) / max(1, len(head))


def main(argv: list[str] | None = None, prog: str | None = None, parser=argparse.ArgumentParser) -> None:
    """``parser``: the ArgumentParser class (``attnscope train`` passes its own, with one-line errors)."""
    ap = train_parser(PRESETS, prog, parser)
    args = ap.parse_args(argv)
    cfg = PRESETS[args.preset]
    overrides = {
        k: getattr(args, k)
        for k in (
            *("corpus", "out", "max_steps", "max_minutes", "batch_size", "lr", "min_lr", "warmup_steps", "threads"),
            *("repeat_frac", "random_span_frac"),
        )
        if getattr(args, k) is not None
    }
    if args.new_phase and not args.resume:
        ap.error("--new-phase needs --resume")
    state_file = Path(overrides.get("out", cfg.out)) / "train_state.pt"
    if args.resume and not args.new_phase and state_file.exists():
        # continue on the saved schedule, except what this command line sets
        saved = torch.load(state_file, map_location="cpu", weights_only=False).get("schedule", {})
        overrides = {**{k: v for k, v in saved.items() if k != "phase_start"}, **overrides}
    from .checkpoint import CheckpointError

    try:
        device = setup_device(args.device, strict=True)
    except CheckpointError as e:
        ap.exit(1, f"{ap.prog}: --device {args.device}: {e}; use --device cpu or auto\n")
    if "batch_size" not in overrides and device.startswith("cuda"):
        overrides["batch_size"] = CUDA_BATCH_SIZE
    cfg = replace(cfg, **overrides)
    corpus = Path(cfg.corpus)
    missing = [name for name in ("train.txt", "val.txt") if not (corpus / name).is_file()]
    if missing:
        ap.exit(
            1,
            f"{ap.prog}: no corpus in {corpus} ({', '.join(missing)} missing): build it with "
            f"`python -m attnscope.model.ours.corpus --out {corpus}` (see docs/MODELS.md, Train your own model)\n",
        )
    empty = [name for name in ("train.txt", "val.txt") if not read_documents(corpus / name)]
    if empty:
        ap.exit(
            1,
            f"{ap.prog}: the corpus in {corpus} is empty (no document in {' or '.join(empty)}): rebuild it with "
            f"`python -m attnscope.model.ours.corpus --out {corpus}` after installing its sources "
            "(see docs/MODELS.md)\n",
        )
    try:
        final = train(cfg, resume=args.resume, device=device, new_phase=args.new_phase)
    except ResumeError as e:
        ap.error(str(e))
    print(json.dumps(final))


if __name__ == "__main__":
    main()
