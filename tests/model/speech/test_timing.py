"""The words' times (model/speech/timing.py) on a tiny Whisper run eagerly by transformers: a generated
transcript's token times are generate(return_token_timestamps=True)'s, from the cross-attention of a
teacher-forced pass (eager ``output_attentions``); the words cover the transcript's text tokens in order,
each from the time of the token before it to its last token's time."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("soundfile")

from attnscope.model.speech.audio import decode_audio  # noqa: E402
from attnscope.model.speech.timing import token_timestamps, words_of  # noqa: E402

from tests.kit.speech import ALIGNMENT_HEADS, audio_file, build_whisper  # noqa: E402


@pytest.fixture(scope="module")
def whisper(tmp_path_factory):
    from transformers import AutoProcessor, WhisperForConditionalGeneration

    folder = build_whisper(tmp_path_factory.mktemp("whisper") / "tiny")
    model = WhisperForConditionalGeneration.from_pretrained(folder, attn_implementation="eager").eval()
    return model, AutoProcessor.from_pretrained(folder)


@pytest.mark.parametrize("seconds", [2.0, 7.5])
def test_a_written_transcripts_times_are_generates(whisper, seconds):
    model, processor = whisper
    rec = decode_audio(audio_file(seconds, "FLAC", seed=int(seconds)), 16000, 30.0)
    feats = processor.feature_extractor(
        rec.samples, sampling_rate=16000, return_tensors="pt", return_attention_mask=True
    )
    with torch.no_grad():
        out = model.generate(
            feats.input_features, attention_mask=feats.attention_mask, return_token_timestamps=True,
            max_new_tokens=12, do_sample=False,
        )
        init = model.generation_config.decoder_start_token_id, model.generation_config.no_timestamps_token_id
        ids = [*init, *out["sequences"][0].tolist()]
        fed = model(feats.input_features, decoder_input_ids=torch.tensor([ids]), output_attentions=True)
    num_frames = int(feats.attention_mask.sum())
    times = token_timestamps(model, list(fed.cross_attentions), ids, ALIGNMENT_HEADS, 2, num_frames, 0.02)
    assert len(times) == len(ids) and times[:2] == [0.0, 0.0]
    want = out["token_timestamps"][0].tolist()
    assert times[2:] == pytest.approx(want, abs=1e-4)
    assert max(times) <= num_frames // 2 * 0.02 + 1e-6  # cropped to the audio's own frames
    assert times == sorted(times)


def test_words_cover_the_text_tokens_in_order(whisper):
    _, processor = whisper
    tok = processor.tokenizer
    text_ids = tok.encode(" The cat sat on the mat.", add_special_tokens=False)
    ids = [tok.convert_tokens_to_ids("<|startoftranscript|>"), tok.convert_tokens_to_ids("<|notimestamps|>")]
    ids += text_ids + [tok.eos_token_id]
    times = [0.0, 0.0] + [0.1 * (i + 1) for i in range(len(text_ids))] + [0.1 * len(text_ids)]
    words = words_of(tok, ids, times)
    assert "".join(w["word"] for w in words) == " The cat sat on the mat."
    assert words[0]["tokens"][0] == 2 and words[-1]["tokens"][1] == len(ids) - 1
    for w, after in zip(words, words[1:] + [None]):
        a, b = w["tokens"]
        assert tok.decode(ids[a:b]) == w["word"]
        assert (w["start"], w["end"]) == (times[a - 1], times[b - 1])
        if after is not None:
            assert after["tokens"][0] == b
