#!/usr/bin/env bash
# Candidates for the shipped model, trained side by side on one GPU (docs/MODEL_CARD.md, "Trained
# again on a GPU"): the goal is a clear previous-token head without losing held-out bits per byte.
#
#     bash scripts/gpu_candidates.sh prepare     # here, on the CPU: data/candidates.tar.xz
#     bash scripts/gpu_candidates.sh OUT         # on the GPU (bench/gpu_run.sh calls it): OUT/cand-*.tar
#
# `prepare` needs the corpus (`python -m attnscope.model.ours.corpus --out data/corpus`). Every run
# keeps the shipped tokenizer (its tokenizer.json in the run folder is reused, and so are the token ids
# in tokens.npz). The fine-tunes start from the shipped weights with a fresh AdamW state.
set -u
if [ "${1:-}" = prepare ]; then
    rm -rf data/candidates && mkdir -p data/candidates
    cp data/corpus/train.txt data/corpus/val.txt data/corpus/sentences_val.txt data/candidates/
    python - <<'EOF' || exit 1
import shutil
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from attnscope.model.ours.checkpoint import load_ours
from attnscope.model.ours.tokenizer import BPETokenizer
from attnscope.model.ours.train import _optimizer, read_documents, tokenize_split
from attnscope.model.ours.train_config import PRESETS

shipped = Path("model/ours/checkpoints/attnscope-small")
tok = BPETokenizer.load(shipped / "tokenizer.json")
corpus = Path("data/candidates")
train = tokenize_split(tok, read_documents(corpus / "train.txt"))
val = tokenize_split(tok, read_documents(corpus / "val.txt"))
np.savez_compressed(corpus / "tokens.npz", train=train, val=val)
print("tokens", len(train), len(val))
model, _ = load_ours(shipped)
cfg = PRESETS["small"]
opt = _optimizer(model, cfg)
import json
training = json.loads((shipped / "training.json").read_text())
state = {
    "model": model.state_dict(), "optimizer": opt.state_dict(),
    "schedule": {"lr": cfg.lr, "min_lr": cfg.min_lr, "warmup_steps": cfg.warmup_steps,
                 "max_steps": training["step"], "phase_start": 0},
    "step": training["step"], "history": training["history"], "tokens_seen": training["tokens_seen"],
    "elapsed": training["train_minutes"] * 60,
}
torch.save(state, corpus / "shipped_state.pt")
shutil.copy(shipped / "tokenizer.json", corpus / "tokenizer.json")
EOF
    tar -C data -cJf data/candidates.tar.xz candidates && ls -la data/candidates.tar.xz
    exit 0
fi

OUT=${1:?OUT}
work=/tmp/candidates
rm -rf "$work" && mkdir -p "$work" && tar -C "$work" -xJf data/candidates.tar.xz
c=$work/candidates
run() {  # run NAME [FINETUNE] OPTIONS...: one training run in its own folder, its log in OUT
    local name=$1
    shift
    mkdir -p "$work/$name"
    cp "$c/tokenizer.json" "$work/$name/"
    python3 -c "import numpy as n; z = n.load('$c/tokens.npz'); n.savez('$work/$name/tokens.npz', **z)"
    if [ "$1" = finetune ]; then
        shift
        cp "$c/shipped_state.pt" "$work/$name/train_state.pt"
        set -- --resume --new-phase "$@"
    fi
    python3 -m attnscope.model.ours.train --preset small --device cuda --threads 2 --corpus "$c" \
        --out "$work/$name" "$@" >"$work/$name.log" 2>&1
    echo "$name: exit $?" >>"$work/$name.log"
}
candidate() {  # candidate NAME: the settings of each run tried (docs/MODEL_CARD.md gives their figures)
    case $1 in
    # fine-tunes of the shipped model on copy spans of random tokens (which only a previous-token head and
    # an induction head predict); --max-minutes counts the shipped run's 178.9 minutes
    ft3k) run ft3k finetune --max-steps 25500 --lr 6e-4 --min-lr 5e-5 --warmup-steps 200 \
        --repeat-frac 0.75 --random-span-frac 1.0 --max-minutes 182.2 ;;
    ft3kb) run ft3kb finetune --max-steps 25500 --batch-size 128 --lr 6e-4 --min-lr 5e-5 --warmup-steps 200 \
        --repeat-frac 0.5 --random-span-frac 1.0 --max-minutes 182.2 ;;
    # from scratch, with more copy spans of random tokens than the shipped model's (0.5 and 0.25)
    s4k) run s4k --max-steps 4000 --batch-size 128 --repeat-frac 0.6 --random-span-frac 0.6 --max-minutes 3.3 ;;
    s6k) run s6k --max-steps 6000 --batch-size 128 --repeat-frac 0.75 --random-span-frac 0.75 --max-minutes 3.3 ;;
    s6k9) run s6k9 --max-steps 6000 --batch-size 128 --repeat-frac 0.9 --random-span-frac 0.9 --max-minutes 3.6 ;;
    s6k1) run s6k1 --max-steps 6000 --batch-size 128 --repeat-frac 1.0 --random-span-frac 1.0 --max-minutes 3.6 ;;
    s8k) run s8k --max-steps 8000 --batch-size 128 --repeat-frac 0.75 --random-span-frac 0.75 --max-minutes 3.6 ;;
    s8k9) run s8k9 --max-steps 8000 --batch-size 128 --repeat-frac 0.9 --random-span-frac 0.9 --max-minutes 3.6 ;;
    *) echo "no candidate $1" && return 1 ;;
    esac
}
names=(${NAMES:-ft3k ft3kb s4k s6k})
for name in "${names[@]}"; do candidate "$name" & done
wait
# what comes back (the device tool returns at most 8 files of 16 MiB): the logs, two checkpoints a file
for name in "${names[@]}"; do
    echo "=== $name" && tr '\r' '\n' <"$work/$name.log" | grep -v '^ *[0-9]*%|'
done >"$OUT/train.log"
for ((i = 0; i < ${#names[@]}; i += 2)); do
    pair=("${names[@]:i:2}")
    tar -C "$work" -cf "$OUT/cand-${pair[0]}.tar" "${pair[@]/%//checkpoint}"
done
