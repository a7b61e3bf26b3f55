"""A 30 s recording through a whisper-base-shaped model on the CPU: attnscope's answers against transformers
eager with ``output_attentions``.

    python bench/speech_bench.py [--threads 4] [--repeats 3] [--target-tokens 24]

The model has Whisper base's shape (d_model 512, 6 + 6 layers of 8 heads, 80 mel bins, 1,500 frames, a
51,865-token vocabulary) and random weights built here (the timings do not depend on the weights); the
tokenizer is the tests' tiny one (tests/kit/speech.py), the target a typed sentence teacher-forced after the
task tokens. Printed: the median wall time and the size of

* eager: ``WhisperForConditionalGeneration(input_features, decoder_input_ids, output_attentions=True)``, the
  three stacks' attention tensors in float32 (what a person holding them keeps);
* attnscope's grid answer (every head's statistics and 64 × 64 thumbnail, b64) of the encoder stack and of the
  cross stack, and the chosen cross head's whole T × 1,500 pattern with every head's times (b64, f4),
  each with the recording decoded, its features, the target's ``token_timestamps`` and ``words``.
"""

from __future__ import annotations

import argparse
import base64
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from attnscope.app.compute.attention import attention_json  # noqa: E402
from attnscope.app.schemas.attention import AttentionRequest  # noqa: E402
from attnscope.app.service import build_service  # noqa: E402
from attnscope.app.subject import subject_of  # noqa: E402
from attnscope.model.registry import load_model  # noqa: E402

from tests.kit.speech import audio_file, build_whisper  # noqa: E402

BASE = dict(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8, decoder_attention_heads=8,
            encoder_ffn_dim=2048, decoder_ffn_dim=2048, vocab_size=51865, max_target_positions=448)
TARGET = " The cat sat on the mat. The dog sat on the log. She told her brother that the train would leave."


def base_shaped(out: Path) -> Path:
    """The tests' tiny Whisper folder, its model replaced by one of Whisper base's shape."""
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    build_whisper(out)
    config = WhisperConfig.from_pretrained(out)
    for key, value in BASE.items():
        setattr(config, key, value)
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config)
    model.generation_config = WhisperForConditionalGeneration.from_pretrained(out).generation_config
    model.save_pretrained(out)
    return out


def timed(fn, repeats: int):
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        folder = base_shaped(Path(tmp) / "whisper-base-shaped")
        svc = build_service(load_model(folder, "cpu"), with_heads=False)
        audio = base64.b64encode(audio_file(30.0, "WAV", rate=16000, channels=1)).decode()
        print(f"whisper-base-shaped, random weights, {args.threads} threads, a 30 s WAV, target {TARGET!r}")

        def ask(**body):
            req = AttentionRequest.model_validate(dict(audio=audio, target=TARGET, encoding="b64", **body))
            return attention_json(svc, req, subject_of(svc, req))[0]

        grid = dict(include=["stats"], stats_rows=False, thumbnail=64, top_k=0)
        cases = {
            "attnscope grid, encoder stack": dict(stack="encoder", **grid),
            "attnscope grid, cross stack": dict(stack="cross", **grid),
            "attnscope one cross head, whole": dict(stack="cross", layers=[5], heads=[0], include=["pattern"]),
        }
        first = None
        for name, body in cases.items():
            seconds, answer = timed(lambda body=body: ask(**body), args.repeats)
            first = first or answer
            print(f"{name:<36} {seconds:7.2f} s {len(answer) / 2**20:9.2f} MiB")
        run_eager(folder, first, args.repeats)


def run_eager(folder: Path, answer: bytes, repeats: int) -> None:
    import json

    from attnscope.model.speech.audio import decode_audio
    from transformers import AutoFeatureExtractor, WhisperForConditionalGeneration

    ids = json.loads(answer)["target_ids"]
    model = WhisperForConditionalGeneration.from_pretrained(folder, attn_implementation="eager").eval()
    extractor = AutoFeatureExtractor.from_pretrained(folder)
    data = audio_file(30.0, "WAV", rate=16000, channels=1)

    def run():
        rec = decode_audio(data, 16000, 30.0)
        feats = extractor(rec.samples, sampling_rate=16000, return_tensors="pt")
        with torch.no_grad():
            return model(feats.input_features, decoder_input_ids=torch.tensor([ids]), output_attentions=True)

    seconds, out = timed(run, repeats)
    size = sum(a.numel() * a.element_size() for name in ("encoder_attentions", "decoder_attentions",
                                                          "cross_attentions") for a in getattr(out, name))
    print(f"{'eager output_attentions (3 stacks)':<36} {seconds:7.2f} s {size / 2**20:9.2f} MiB (float32 tensors)")


if __name__ == "__main__":
    main()
