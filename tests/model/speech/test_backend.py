"""WhisperBackend (model/speech/backend.py) on a tiny multilingual Whisper: the task tokens it puts first are
the ones generate() puts first (the language detected from the recording, ``<|notimestamps|>``), and
the transcript it writes is generate()'s own, after them."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("soundfile")

from attnscope.model.registry import load_model  # noqa: E402
from attnscope.model.speech.audio import decode_audio  # noqa: E402

from tests.kit.speech import audio_file, build_whisper  # noqa: E402


def test_a_multilingual_models_task_tokens_and_transcript_are_generates(tmp_path):
    from transformers import WhisperForConditionalGeneration

    folder = build_whisper(tmp_path / "multi", multilingual=True)
    backend = load_model(folder, "cpu").backend
    ear = backend.ear
    heard = ear.hear(decode_audio(audio_file(2.0, "MP3", seed=4), ear.sample_rate, 30.0), torch.float32, "cpu")
    bound = backend.hearing(heard)
    start = bound.decoder_start()
    gen = backend.model.generation_config
    assert start[0] == gen.decoder_start_token_id and start[-1] == gen.no_timestamps_token_id
    assert len(start) == 3 and start[1] in gen.lang_to_id.values()  # no task set: generate() adds none
    ref = WhisperForConditionalGeneration.from_pretrained(folder, attn_implementation="eager").eval()
    mask = torch.zeros(1, heard.features.shape[-1], dtype=torch.long)
    mask[:, : heard.num_frames] = 1
    with torch.no_grad():
        out = ref.generate(heard.features, attention_mask=mask, do_sample=False, max_new_tokens=8)
    assert bound.write(bound.source_ids(), max_new_tokens=8) == start + out[0].tolist()
    assert backend.decoder_start() == [gen.decoder_start_token_id]  # the bound copy's, not the model's
