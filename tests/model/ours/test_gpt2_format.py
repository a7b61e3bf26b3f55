"""Our GPT and Hugging Face's GPT2LMHeadModel are the same function, both ways round."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from attnscope.model.inspection import inspect
from attnscope.model.ours.checkpoint import CheckpointError
from attnscope.model.ours.gpt2_format import export_hf, load_hf_dir
from attnscope.model.registry import load_model

transformers = pytest.importorskip("transformers")

TEXTS = ["The cat sat on the mat.", "She opened a red door before the rain!", "Ça 😀 漢字 שלום\n\tok"]
TOL = 1e-4


def hf_tiny_model(vocab_size: int, seed: int = 0):
    config = transformers.GPT2Config(
        vocab_size=vocab_size,
        n_positions=32,
        n_embd=32,
        n_layer=2,
        n_head=4,
        activation_function="gelu_new",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
        attn_implementation="eager",  # the fused kernels return no attention weights
    )
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(config)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # non-trivial biases and LayerNorms, so a wrong layout cannot hide
        for p in model.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g))
    return model.eval()


def hf_outputs(hf_model, ids: list[int]):
    with torch.no_grad():
        out = hf_model(torch.tensor([ids]), output_attentions=True)
    return out.logits[0], torch.stack([a[0] for a in out.attentions])  # (T, V), (L, nh, T, T)


def assert_same_function(ours, tokenizer, hf_model):
    for text in TEXTS:
        trace = inspect(ours, tokenizer, text)
        logits, attentions = hf_outputs(hf_model, trace.token_ids)
        assert (trace.logits - logits).abs().max().item() <= TOL
        assert (trace.pattern - attentions).abs().max().item() <= TOL
        with torch.no_grad():
            fast, _ = ours(torch.tensor([trace.token_ids]))
        assert (fast[0] - logits).abs().max().item() <= TOL


def load_eager(directory):
    return transformers.GPT2LMHeadModel.from_pretrained(directory, attn_implementation="eager").eval()


@pytest.fixture
def hf_dir(tmp_path, tokenizer):
    """A random transformers GPT-2 saved with save_pretrained, with our tokenizer saved by transformers too."""
    hf_model = hf_tiny_model(tokenizer.vocab_size)
    directory = tmp_path / "hf"
    hf_model.save_pretrained(directory)
    transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer.tk).save_pretrained(directory)
    return directory, hf_model


def test_transformers_gpt2_loads_into_our_model(hf_dir, tokenizer):
    directory, hf_model = hf_dir
    ours, tok = load_hf_dir(directory)
    assert ours.config.block_size == 32 and ours.config.n_head == 4 and ours.config.vocab_size == tokenizer.vocab_size
    assert all(tok.encode_ids(t) == tokenizer.encode_ids(t) for t in TEXTS)
    assert_same_function(ours, tok, hf_model.eval())


def test_load_checkpoint_dispatches_a_gpt2_directory(hf_dir):
    directory, hf_model = hf_dir
    loaded = load_model(directory, device="cpu")
    assert not loaded.model.training and loaded.device.type == "cpu"
    assert_same_function(loaded.model, loaded.tokenizer, hf_model)


def test_export_round_trip_through_transformers(make_model, tokenizer, tmp_path):
    ours = make_model(seed=3)
    directory = export_hf(ours, tokenizer, tmp_path / "export")
    config = json.loads((directory / "config.json").read_text())
    assert config["model_type"] == "gpt2" and config["activation_function"] == "gelu_new"
    assert config["n_positions"] == ours.config.block_size
    assert config["bos_token_id"] == config["eos_token_id"] == tokenizer.eot_id
    assert all(config[k] == 0 for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop"))

    hf_model = load_eager(directory)
    hf_tok = transformers.PreTrainedTokenizerFast(tokenizer_file=str(directory / "tokenizer.json"))
    auto_tok = transformers.AutoTokenizer.from_pretrained(directory)
    for text in TEXTS:
        ids = tokenizer.encode_ids(text)
        assert hf_tok(text)["input_ids"] == ids
        assert auto_tok(text)["input_ids"] == ids
        assert auto_tok.decode(ids) == text
    assert auto_tok.eos_token == "<|endoftext|>"
    assert_same_function(ours, tokenizer, hf_model)

    # and back: the exported directory loads into an identical model
    back, back_tok = load_hf_dir(directory)
    for key, value in ours.state_dict().items():
        assert torch.equal(back.state_dict()[key], value), key
    assert back.config.name == ours.config.name  # no name given: the model's own
    named = export_hf(ours, tokenizer, tmp_path / "named", name="an edited copy")
    assert load_hf_dir(named)[0].config.name == "an edited copy"
    assert back_tok.encode(TEXTS[2]) == tokenizer.encode(TEXTS[2])


def test_export_needs_no_transformers(make_model, tokenizer, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # any `import transformers` now fails
    directory = export_hf(make_model(), tokenizer, tmp_path / "plain")
    names = {p.name for p in directory.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    assert {"special_tokens_map.json", "generation_config.json"} <= names


def test_legacy_gpt2_layout_and_vocab_merges(hf_dir, tokenizer, tmp_path):
    """Original GPT-2 files: pytorch_model.bin without the `transformer.` prefix, with the
    attn.bias / attn.masked_bias buffers, an lm_head copy, n_ctx, and vocab.json + merges.txt."""
    _, hf_model = hf_dir
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    state = {k.removeprefix("transformer."): v.clone() for k, v in hf_model.state_dict().items()}
    state["lm_head.weight"] = state["wte.weight"].clone()
    for i in range(hf_model.config.n_layer):
        state[f"h.{i}.attn.bias"] = torch.tril(torch.ones(32, 32)).view(1, 1, 32, 32)
        state[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    torch.save(state, legacy / "pytorch_model.bin")
    config = hf_model.config.to_dict()
    config["n_ctx"] = config.pop("n_positions")
    (legacy / "config.json").write_text(json.dumps(config))
    tokenizer.tk.model.save(str(legacy))  # vocab.json and merges.txt

    ours, tok = load_hf_dir(legacy)
    assert ours.config.block_size == 32
    assert all(tok.encode_ids(t) == tokenizer.encode_ids(t) for t in TEXTS + ["a<|endoftext|>b"])
    assert_same_function(ours, tok, hf_model)


def test_untied_output_embedding_is_refused(hf_dir):
    directory, hf_model = hf_dir
    state = {k: v.clone() for k, v in hf_model.state_dict().items()}
    state["lm_head.weight"] = state["transformer.wte.weight"] + 1.0
    (directory / "model.safetensors").unlink()
    torch.save(state, directory / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="lm_head"):
        load_hf_dir(directory)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"activation_function": "relu"}, "activation_function"),
        ({"activation_function": "quick_gelu"}, "activation_function"),
        ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
        ({"scale_attn_weights": False}, "scale_attn_weights"),
        ({"add_cross_attention": True}, "add_cross_attention"),
        ({"n_inner": 96}, "n_inner"),
        ({"n_head": 5}, "n_head"),
        ({"model_type": "gpt_neo"}, "model_type"),
    ],
)
def test_configs_we_cannot_run_are_refused(hf_dir, change, named):
    directory, _ = hf_dir
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(CheckpointError, match=named):
        load_hf_dir(directory)


def test_missing_pieces_are_named(hf_dir):
    directory, _ = hf_dir
    (directory / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="no weights"):
        load_hf_dir(directory)
    (directory / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match="no tokenizer"):
        load_hf_dir(directory)
    (directory / "config.json").unlink()
    with pytest.raises(CheckpointError, match="config.json"):
        load_hf_dir(directory)
