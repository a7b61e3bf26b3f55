"""The API over a speech model (a tiny Whisper built in the test): /api/model's audio facts; the cross and
decoder stacks' patterns equal transformers eager ``output_attentions`` on the processor's features of the
same recording; a written transcript is generate()'s and its token times are generate()'s
(return_token_timestamps); a typed target's times are ``_extract_token_timestamps`` on eager's
cross-attention; the words tile the target's text; switching an alignment head off moves the times; and
every bad recording is a 422 or 413 naming ``audio`` while the server keeps serving."""

from __future__ import annotations

import base64

import numpy as np
import pytest
import torch

from tests.kit.app import attention, served

pytest.importorskip("transformers")
pytest.importorskip("soundfile")

from attnscope.model.speech.audio import decode_audio  # noqa: E402
from transformers import AutoProcessor, WhisperForConditionalGeneration  # noqa: E402

from tests.kit.speech import ALIGNMENT_HEADS, audio_file, build_whisper  # noqa: E402

TARGET = " The cat sat on the mat."
EAGER = {"decoder": "decoder_attentions", "cross": "cross_attentions"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return build_whisper(tmp_path_factory.mktemp("speech") / "whisper")


@pytest.fixture(scope="module")
def clients(folder, checkpoint_dir):
    with served({"whisper": folder, "ours": checkpoint_dir}) as out:
        yield out


@pytest.fixture(scope="module")
def reference(folder):
    model = WhisperForConditionalGeneration.from_pretrained(folder, attn_implementation="eager").eval()
    return model, AutoProcessor.from_pretrained(folder)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def features(processor, data: bytes):
    rec = decode_audio(data, 16000, 30.0)
    extract = processor.feature_extractor
    return extract(rec.samples, sampling_rate=16000, return_tensors="pt", return_attention_mask=True)


def test_model_says_it_hears(clients):
    info = clients["whisper"].get("/api/model").json()
    assert info["audio"] is True and info["subject"] == ["audio", "target"]
    assert info["audio_limits"]["max_seconds"] == 30.0 and info["audio_limits"]["max_bytes"] > 0
    assert info["alignment_heads"] == ALIGNMENT_HEADS
    assert info["architecture"] == "encoder-decoder"
    text = clients["ours"].get("/api/model").json()
    assert text["audio"] is False and text["audio_limits"] is None and "audio" not in text["subject"]


@pytest.mark.parametrize("stack", ["cross", "decoder"])
def test_patterns_equal_eager_on_the_processors_features(stack, clients, reference):
    model, processor = reference
    data = audio_file(2.5, "FLAC", seed=3)  # 44.1 kHz stereo
    got = attention(clients["whisper"], audio=b64(data), target=TARGET, stack=stack, include=["pattern"], top_k=2)
    assert got["target_generated"] is False and got["stack"] == stack
    assert got["audio"]["duration"] == pytest.approx(2.5, abs=1e-3)
    assert (got["audio"]["frames"], got["audio"]["seconds_per_frame"]) == (1500, 0.02)
    assert got["audio"]["audio_frames"] == 125 and got["source_tokens"][:3] == ["0.00s", "0.02s", "0.04s"]
    assert got["target_ids"][:2] == [model.generation_config.decoder_start_token_id,
                                      model.generation_config.no_timestamps_token_id]
    assert got["target_ids"][-1] == model.generation_config.eos_token_id
    feats = features(processor, data)
    with torch.no_grad():
        out = model(feats.input_features, decoder_input_ids=torch.tensor([got["target_ids"]]), output_attentions=True)
    for layer, expected in zip(got["layers"], getattr(out, EAGER[stack]), strict=True):
        for head in layer["heads"]:
            np.testing.assert_allclose(head["pattern"], expected[0, head["head"]].numpy(), atol=2e-5)
    # the typed target's times: transformers' own function on eager's cross-attention, its last row not fed
    from transformers.generation.utils import GenerateEncoderDecoderOutput

    ids = got["target_ids"]
    fed = tuple(c[:, :, : len(ids) - 1] for c in out.cross_attentions)
    gen = GenerateEncoderDecoderOutput(sequences=torch.tensor([ids]), cross_attentions=(fed,))
    want = model._extract_token_timestamps(gen, ALIGNMENT_HEADS, num_frames=int(feats.attention_mask.sum()),
                                           num_input_ids=2)
    assert got["token_timestamps"] == pytest.approx(want[0, : len(ids)].tolist(), abs=1e-4)
    words = got["words"]
    assert "".join(w["word"] for w in words) == TARGET
    assert all(w["start"] <= w["end"] for w in words)
    assert [w["tokens"][0] for w in words[1:]] == [w["tokens"][1] for w in words[:-1]]


def test_q_is_the_projection_and_the_divisor_sqrt_head_dim(clients, reference):
    """Whisper multiplies q by head_dim^-0.5 itself and asks its attention for no scale: the answer's q is still
    q_proj's output (a hook on a transformers load is the oracle) and the divisor √head_dim, as in every family."""
    model, processor = reference
    data = audio_file(1.0, "WAV", seed=5)
    got = attention(clients["whisper"], audio=b64(data), target=TARGET, stack="encoder", layers=[0], heads=[0],
                    include=["pattern", "q"], top_k=0)
    head_dim = model.config.d_model // model.config.encoder_attention_heads
    assert got["layers"][0]["divisor"] == pytest.approx(head_dim**0.5)
    assert got["layers"][0]["divisor_rule"] == "sqrt(head_dim)"
    seen = []
    attn = model.model.encoder.layers[0].self_attn
    hook = attn.q_proj.register_forward_hook(lambda m, args, out: seen.append(out))
    try:
        with torch.no_grad():
            model.model.encoder(features(processor, data).input_features)
    finally:
        hook.remove()
    q = seen[0][0].view(seen[0].shape[1], -1, head_dim)[:, 0]  # (T, hs): head 0 as projected
    np.testing.assert_allclose(got["layers"][0]["heads"][0]["q"], q.numpy(), atol=1e-4)  # JSON: 4 decimals


def test_a_written_transcript_and_its_times_are_generates(clients, reference):
    model, processor = reference
    data = audio_file(4.0, "WAV", seed=5)
    got = attention(clients["whisper"], audio=b64(data), stack="cross", include=["pattern"], layers=[0], heads=[0])
    assert got["target_generated"] is True
    feats = features(processor, data)
    with torch.no_grad():
        out = model.generate(feats.input_features, attention_mask=feats.attention_mask, do_sample=False,
                             max_new_tokens=32, return_token_timestamps=True)
    assert got["target_ids"][2:] == out["sequences"][0].tolist()
    assert got["token_timestamps"][2:] == pytest.approx(out["token_timestamps"][0].tolist(), abs=1e-4)


def typed(array: dict) -> np.ndarray:
    shape = tuple(int(n) for n in array["shape"].split(","))
    return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"]).reshape(shape)


def test_times_without_a_head_are_transformers_on_the_answers_own_cross_attention(clients, reference):
    model, _ = reference
    body = dict(audio=b64(audio_file(3.0, "OGG", seed=7)), target=TARGET, include=["pattern"], encoding="b64")
    base = attention(clients["whisper"], stack="cross", **body)
    off = [{"layer": 0, "head": head} for head in range(4)]  # layer 0's cross heads: layer 1's keys change
    cross = attention(clients["whisper"], stack="cross", ablate=off, **body)
    decoder = attention(clients["whisper"], stack="decoder", ablate=off, **body)
    assert decoder["token_timestamps"] == base["token_timestamps"]  # another stack's what-if: the cross as trained
    from transformers.generation.utils import GenerateEncoderDecoderOutput

    ids = cross["target_ids"]
    def heads(layer):
        return torch.tensor(np.stack([typed(h["pattern"]) for h in layer["heads"]]))[None]  # (1, nh, T, frames)

    layers = [heads(layer) for layer in cross["layers"]]
    assert not torch.allclose(layers[1], heads(base["layers"][1]))
    fed = tuple(c[:, :, : len(ids) - 1] for c in layers)
    gen = GenerateEncoderDecoderOutput(sequences=torch.tensor([ids]), cross_attentions=(fed,))
    want = model._extract_token_timestamps(gen, ALIGNMENT_HEADS, num_frames=300, num_input_ids=2)
    assert cross["token_timestamps"] == pytest.approx(want[0, : len(ids)].tolist(), abs=1e-4)


@pytest.mark.parametrize("ablate", [[], [{"layer": 0, "head": 0}]])
def test_the_alignment_mean_is_the_mean_of_the_served_alignment_heads(ablate, clients):
    data = audio_file(2.0, "WAV", seed=11)
    body = dict(audio=b64(data), target=TARGET, stack="cross", include=["pattern"], encoding="b64", ablate=ablate)
    got = attention(clients["whisper"], alignment_mean=True, **body)
    assert clients["whisper"].get("/api/model").json()["alignment_heads"] == ALIGNMENT_HEADS
    served = {(layer["layer"], h["head"]): typed(h["pattern"]) for layer in got["layers"] for h in layer["heads"]}
    want = np.mean([served[(layer, head)] for layer, head in ALIGNMENT_HEADS], axis=0)
    mean = np.array(got["alignment_mean"])
    assert mean.shape == (len(got["target_ids"]), got["audio"]["frames"])
    np.testing.assert_allclose(mean, want, atol=2e-6)
    np.testing.assert_allclose(mean.sum(axis=1), 1.0, atol=1e-4)  # a mean of rows that each sum to 1
    assert "alignment_mean" not in attention(clients["whisper"], **body)  # asked only


def test_the_waveform_is_each_columns_min_and_max_of_the_heard_samples(clients):
    data = audio_file(2.5, "FLAC", seed=5)
    got = attention(clients["whisper"], audio=b64(data), target=TARGET, stack="cross", spectrogram=True, top_k=0)
    wave, audio = got["audio"]["waveform"], got["audio"]
    samples = decode_audio(data, 16000, 30.0).samples
    columns = len(wave["min"])
    assert 0 < columns == len(wave["max"]) <= 1000
    per = round(wave["seconds_per_column"] * audio["sample_rate"])
    assert (columns - 1) * per < len(samples) <= columns * per  # the columns tile the recording from 0 s
    for c in (0, columns // 2, columns - 1):
        chunk = samples[c * per : (c + 1) * per]
        assert wave["min"][c] == pytest.approx(chunk.min(), abs=6e-5)
        assert wave["max"][c] == pytest.approx(chunk.max(), abs=6e-5)
    assert all(lo <= hi for lo, hi in zip(wave["min"], wave["max"]))
    assert "waveform" not in attention(clients["whisper"], audio=b64(data), target=TARGET, top_k=0)["audio"]


def test_bad_recordings_are_refused_naming_audio(clients, folder):
    client = clients["whisper"]
    good = audio_file(1.0, "WAV")
    cases = {
        "audio_not_audio": b"this is not a recording" * 10,
        "audio_truncated": good[: len(good) // 2],
        "audio_too_long": audio_file(31.0, "WAV", rate=8000, channels=1),
    }
    for kind, data in cases.items():
        r = client.post("/api/attention", json={"audio": b64(data)})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "audio"], r.text
        assert r.json()["detail"][0]["type"] == kind
    import io

    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, np.zeros((800, 1)), 8000, format="AIFF")
    r = client.post("/api/attention", json={"audio": b64(buf.getvalue())})
    assert r.status_code == 422 and r.json()["detail"][0]["type"] == "audio_format"
    for body in ({"text": "hello"}, {"audio": b64(good), "text": "hello"}):
        r = client.post("/api/attention", json=body)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] in ("audio", "text"), r.text
    short = b64(audio_file(0.1, "WAV", rate=8000, channels=1))  # within a text model's body limit
    r = clients["ours"].post("/api/attention", json={"audio": short})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "audio"]
    assert client.get("/healthz").status_code == 200
    from attnscope.app.main import create_app
    from attnscope.app.settings import Settings
    from fastapi.testclient import TestClient

    small = Settings(checkpoint=folder, device="cpu", torch_threads=1, max_audio_bytes=20000)
    with TestClient(create_app(small)) as limited:
        r = limited.post("/api/attention", json={"audio": b64(good)})
        assert r.status_code == 413 and r.json()["detail"][0]["loc"] == ["body", "audio"]
        assert r.json()["detail"][0]["ctx"]["max_bytes"] == 20000
        r = limited.post("/api/attention", json={"audio": b64(audio_file(0.1, "WAV", channels=1)) + "A" * 20})
        assert r.status_code in (413, 422) and r.json()["detail"][0]["loc"] == ["body", "audio"]


def test_the_encoder_stack_is_the_frames_over_the_frames(clients, reference):
    model, processor = reference
    data = audio_file(1.0, "WAV", seed=13)
    body = dict(audio=b64(data), target=TARGET, stack="encoder", encoding="b64")
    got = attention(clients["whisper"], layers=[1], heads=[2], include=["pattern"], **body)
    assert got["tokens"] == got["source_tokens"] and len(got["tokens"]) == 1500
    assert got["tokens"][-1] == "29.98s" and got["token_ids"] == list(range(1500))
    feats = features(processor, data)
    with torch.no_grad():
        out = model.model.encoder(feats.input_features, output_attentions=True)
    np.testing.assert_allclose(typed(got["layers"][0]["heads"][0]["pattern"]), out.attentions[1][0, 2], atol=2e-5)
    grid = attention(clients["whisper"], include=["stats"], stats_rows=False, thumbnail=64, top_k=0, **body)
    assert [len(layer["heads"]) for layer in grid["layers"]] == [4, 4]


def test_a_target_longer_than_the_decoder_is_refused_naming_target(clients):
    r = clients["whisper"].post("/api/attention", json={"audio": b64(audio_file(0.5, "WAV")), "target": " cat" * 200})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "target"]
    assert r.json()["detail"][0]["ctx"]["limit"] == 128


@pytest.mark.parametrize(
    ("url", "body"),
    [
        ("/api/rollout", {"position": 3}),
        ("/api/head-effects", {"position": 3}),
        ("/api/selection", {"layer": 0, "head": 0, "queries": [2], "keys": [0, 1]}),
        ("/api/lens", {}),
    ],
)
def test_the_other_routes_hear_the_recording(url, body, clients):
    r = clients["whisper"].post(url, json={"audio": b64(audio_file(1.0, "WAV")), "target": TARGET, **body})
    assert r.status_code == 200, r.text
    got = r.json()
    if "tokens" in got:
        assert got["tokens"][:2] == ["<|startoftranscript|>", "<|notimestamps|>"]
    if "audio" in got:
        assert got["audio"]["audio_frames"] == 50


def test_generation_continues_a_transcript_of_the_recording(clients):
    r = clients["whisper"].post("/api/generate", json={"audio": b64(audio_file(1.0, "WAV")), "max_new_tokens": 2})
    assert r.status_code == 200, r.text
    assert r.text.count('"step"') == 2


def test_attribution_and_the_why_split_a_transcript(clients, reference):
    """Direct attribution splits the transcript's logit as eager computes it on the processor's features (the
    cross heads carry the recording); the why split of a cross head names its key by the frame's time."""
    model, processor = reference
    data = audio_file(1.0, "WAV")
    body = {"audio": b64(data), "target": TARGET}
    got = clients["whisper"].post("/api/attribution", json={**body, "position": 3}).json()
    with torch.no_grad():
        logits = model(features(processor, data).input_features, decoder_input_ids=torch.tensor([got["target_ids"]]))
    want = float(logits.logits[0, 3, got["token_id"]])
    total = sum(map(sum, got["heads"])) + sum(map(sum, got["cross_heads"])) + sum(got["mlps"]) + got["embed"]
    assert total + got["rest"] == pytest.approx(want, abs=1e-3 * (1 + abs(want)))
    why = clients["whisper"].post("/api/qk-attribution", json={**body, "stack": "cross", "layer": 1, "head": 2,
                                                               "query": 3, "key": 5}).json()
    assert why["key_token"] == "0.10s" and why["key_components"][0] == "enc.embed"
    assert sum(map(sum, why["matrix"])) == pytest.approx(why["score"], abs=1e-3 * (1 + abs(why["score"])))
