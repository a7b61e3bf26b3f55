"""A tiny random-weight Whisper, written to disk the way a user's download is, and audio files to send it.

The model is a ``WhisperConfig`` of two layers a stack (its encoder keeps Whisper's 80 mel bins and 1,500
frames), its query and key weights scaled up so that patterns are far from uniform; the tokenizer is a
byte-level BPE trained here with Whisper's special tokens added, saved as a ``WhisperProcessor`` with the
model's ``WhisperFeatureExtractor``; the generation config names alignment heads. Audio is written by
``soundfile`` (WAV, FLAC, OGG/Vorbis) from a sum of tones whose pitch changes each quarter second.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import torch

from tests.kit.family import QK_GAIN, SP_TEXT

SPECIALS = [
    "<|endoftext|>",
    "<|startoftranscript|>",
    "<|en|>",
    "<|de|>",
    "<|translate|>",
    "<|transcribe|>",
    "<|startoflm|>",
    "<|startofprev|>",
    "<|nospeech|>",
    "<|notimestamps|>",
]
ALIGNMENT_HEADS = [[0, 1], [1, 0], [1, 3]]  # [layer, head] of the decoder's cross-attention
QK_WEIGHTS = ("q_proj.weight", "k_proj.weight")


def whisper_tokenizer():
    """Whisper's tokenizer over a byte-level BPE trained on the test texts, its special tokens added last."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import WhisperTokenizer

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=alphabet, show_progress=False)
    tk.train_from_iterator(SP_TEXT, trainer=trainer)
    tk.add_special_tokens(SPECIALS)
    end = "<|endoftext|>"
    return WhisperTokenizer(tokenizer_object=tk, unk_token=end, bos_token=end, eos_token=end, pad_token=end)


def build_whisper(out: Path, seed: int = 0, multilingual: bool = False) -> Path:
    """Write a tiny random Whisper, its processor and its generation config to ``out``; returns ``out``."""
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperProcessor,
    )

    tok = whisper_tokenizer()
    out.mkdir(parents=True, exist_ok=True)
    WhisperProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=80), tokenizer=tok).save_pretrained(out)
    ids = {name: tok.convert_tokens_to_ids(name) for name in SPECIALS}
    end, start = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    config = WhisperConfig(
        vocab_size=len(tok),
        num_mel_bins=80,
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        max_target_positions=128,
        decoder_start_token_id=start,
        bos_token_id=end,
        eos_token_id=end,
        pad_token_id=end,
        suppress_tokens=[],
        begin_suppress_tokens=[],
    )
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(QK_WEIGHTS):
                p.mul_(QK_GAIN)
    gen = GenerationConfig(
        decoder_start_token_id=start,
        bos_token_id=end,
        eos_token_id=end,
        pad_token_id=end,
        no_timestamps_token_id=ids["<|notimestamps|>"],
        alignment_heads=ALIGNMENT_HEADS,
        max_length=128,
        is_multilingual=multilingual,
        begin_suppress_tokens=[],
        suppress_tokens=[],
    )
    if multilingual:
        gen.lang_to_id = {"<|en|>": ids["<|en|>"], "<|de|>": ids["<|de|>"]}
        gen.task_to_id = {"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]}
    model.generation_config = gen
    model.save_pretrained(out)
    return out


def tones(seconds: float, rate: int = 44100, channels: int = 2, seed: int = 0) -> np.ndarray:
    """``seconds`` of a sum of tones whose pitch changes every quarter second, (samples, channels) in [-1, 1];
    the channels differ (a stereo file's mono mix is their mean)."""
    rng = np.random.default_rng(seed)
    n = int(round(seconds * rate))
    t = np.arange(n) / rate
    pitch = rng.uniform(200, 2000, size=int(seconds * 4) + 1)[(t * 4).astype(int)]
    wave = 0.4 * np.sin(2 * np.pi * np.cumsum(pitch) / rate) + 0.05 * rng.standard_normal(n)
    return np.stack([wave * (0.5 + 0.5 * c / max(1, channels - 1)) for c in range(channels)], axis=1)


def audio_file(seconds: float, fmt: str = "WAV", rate: int = 44100, channels: int = 2, seed: int = 0) -> bytes:
    """A file of :func:`tones` in ``fmt`` (``WAV``, ``FLAC``, ``OGG`` for Vorbis, ``MP3``), as bytes."""
    import soundfile as sf

    buf = io.BytesIO()
    subtype = {"OGG": "VORBIS", "MP3": "MPEG_LAYER_III", "FLAC": "PCM_16", "WAV": "PCM_16"}[fmt]
    sf.write(buf, tones(seconds, rate, channels, seed), rate, format=fmt, subtype=subtype)
    return buf.getvalue()
