"""GGUF files through transformers' GGUF loader: every number equals transformers' own on the same file.

The files are written here (tests/kit/gguf.py: tiny random models, llama.cpp's tensor names and
layouts, the tokenizer as metadata), quantized (Q8_0, Q4_1) and not (F16, F32); the oracle is
transformers' eager attention reading the same file. Bad files fail with one line each.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("gguf", reason='needs the gguf extra: pip install "attnscope[gguf]"')
pytest.importorskip("accelerate", reason='needs the gguf extra: pip install "attnscope[gguf]"')

import gguf  # noqa: E402
from attnscope.model.inspection import inspect  # noqa: E402
from attnscope.model.ours.checkpoint import CheckpointError  # noqa: E402
from attnscope.model.registry import load_model  # noqa: E402
from attnscope.model.sources import (
    gguf_file,  # noqa: E402
    gguf_header,  # noqa: E402
)
from attnscope.model.sources.ollama import list_ollama, parse_name, resolve_ollama  # noqa: E402

from tests.kit import gguf as ggufkit  # noqa: E402
from tests.kit.family import DIVISOR_RULES  # noqa: E402

# family -> the type its matrices are stored in: two quantized, two not
FILES = {"llama": "Q8_0", "qwen2": "F16", "gpt2": "F32", "gemma2": "Q4_1"}
TEXT = "The cat sat on the mat. Then the cat 🎉 saw the dog, and the dog sat on the log."


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf")
    return {fam: ggufkit.write(fam, root / fam / f"tiny-{fam}.{q}.gguf", q) for fam, q in FILES.items()}


@pytest.fixture(scope="module")
def loaded(files):
    return {fam: load_model(path, "cpu") for fam, path in files.items()}


@pytest.mark.parametrize("family", list(FILES))
def test_pattern_and_logits_equal_eager_on_the_same_file(family, files, loaded):
    trace = inspect(loaded[family].backend, None, TEXT)
    ref, logits = ggufkit.eager_reference(files[family], trace.token_ids)
    assert trace.pattern.shape == ref.shape
    assert (trace.pattern - ref).abs().max() <= 1e-5
    assert (trace.logits - logits).abs().max() <= 1e-4
    T = trace.pattern.shape[-1]
    uniform_max = (1.0 / torch.arange(1, T + 1)).mean()
    assert trace.pattern.amax(-1).mean() > 2 * uniform_max  # far from uniform: a wrong layout would show


@pytest.mark.parametrize("family", list(FILES))
def test_facts_name_the_format_and_quantization(family, files, loaded):
    facts = loaded[family].facts
    assert facts.source_format == "gguf" and facts.quantization == FILES[family]
    assert facts.family == family and facts.name == files[family].name
    assert facts.dtype == "float32" and facts.to_dict()["quantization"] == FILES[family]
    assert loaded[family].path == files[family]


@pytest.mark.parametrize("family", list(FILES))
def test_each_layers_divisor_follows_the_config_read_from_the_file(family, files, loaded):
    """The config transformers builds from the file's metadata names every layer's divisor: Gemma 2
    divides by sqrt(query_pre_attn_scalar) (transformers' default, the file has no key for it)."""
    from transformers import AutoConfig

    facts = loaded[family].facts
    cfg = AutoConfig.from_pretrained(str(files[family].parent), gguf_file=str(files[family]), local_files_only=True)
    rule = "sqrt(query_pre_attn_scalar)" if family == "gemma2" else "sqrt(head_dim)"
    assert facts.layer_divisor_rules == [rule] * facts.n_layer and facts.divisor_rule == rule
    by_config = [DIVISOR_RULES[rule](cfg, layer) for layer in range(facts.n_layer)]
    assert facts.layer_divisors == pytest.approx(by_config, rel=1e-6)
    assert inspect(loaded[family].backend, None, TEXT).layer_divisors == facts.layer_divisors


def test_facts_of_the_sentencepiece_file(loaded):
    llama = loaded["llama"].facts
    assert (llama.n_head, llama.n_kv_head, llama.kv_head_of) == (6, 2, [0, 0, 0, 1, 1, 1])
    assert llama.bos_token == "<s>" and llama.positions == "rotary"
    tok = loaded["llama"].tokenizer
    enc = tok.encode("The cat 🎉")
    assert enc.ids[0] == tok.bos_id and enc.offsets[0] == (0, 0)
    assert "␣cat" in enc.tokens and any(t.startswith("<0x") for t in enc.tokens)  # byte fallback
    assert loaded["gpt2"].facts.bos_token is None  # the byte-level files say not to add one


@pytest.mark.parametrize("family", list(FILES))
def test_offsets_rebuild_the_text(family, loaded):
    tok = loaded[family].tokenizer
    for text in (TEXT, "Hello", "  two  spaces\nand a newline", "naïve café — ok?"):
        enc = tok.encode(text)
        assert len(enc.ids) == len(enc.tokens) == len(enc.offsets)
        assert "".join(text[a:b] for a, b in enc.offsets) == text
        assert all(a <= b for a, b in enc.offsets)


def test_header_is_read_without_loading(files):
    header = gguf_header.read_header(files["llama"])
    assert header.architecture == "llama" and header.quantization == "Q8_0"
    ref = gguf.GGUFReader(str(files["llama"]))
    assert [t.name for t in header.tensors] == [t.name for t in ref.tensors]
    assert header.parameters == sum(int(t.n_elements) for t in ref.tensors)
    assert header.data_start < header.data_end <= files["llama"].stat().st_size


def test_type_tables_agree_with_the_gguf_package():
    for type_id, (name, block, size) in gguf_header.GGML_TYPES.items():
        q = gguf.GGMLQuantizationType(type_id)
        assert q.name == name and gguf.GGML_QUANT_SIZES[q] == (block, size)
    for type_id, name in gguf_header.FILE_TYPES.items():
        assert gguf.LlamaFileType(type_id).name.removeprefix("MOSTLY_").removeprefix("ALL_") == name


def test_quantization_without_file_type_is_the_weights_type(tmp_path):
    path = ggufkit.write("qwen2", tmp_path / "q.gguf", "Q8_0")
    header = gguf_header.read_header(path)
    header.metadata.pop("general.file_type")
    assert header.quantization == "Q8_0"


def test_a_folder_holding_one_gguf_opens(files):
    lm = load_model(files["gpt2"].parent, "cpu")
    assert lm.facts.source_format == "gguf" and lm.path == files["gpt2"]


def test_a_folder_holding_two_asks_for_one(files, tmp_path):
    for name in ("a.gguf", "b.gguf"):
        (tmp_path / name).write_bytes(files["gpt2"].read_bytes())
    with pytest.raises(CheckpointError, match=r"2 \.gguf files \(a\.gguf, b\.gguf\)"):
        load_model(tmp_path, "cpu")


# ------------------------------------------------------------------ bad files: one line each


def one_line(excinfo) -> str:
    msg = str(excinfo.value)
    assert "\n" not in msg
    return msg


def test_truncated_file(files, tmp_path):
    data = files["qwen2"].read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError) as e:
        load_model(cut, "cpu")
    assert "truncated" in one_line(e) and f"{len(data) // 2:,} bytes" in one_line(e)
    cut.write_bytes(data[:200])  # inside the metadata
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_model(cut, "cpu")


def test_corrupt_header(files, tmp_path):
    data = bytearray(files["llama"].read_bytes())
    data[8:16] = (2**62).to_bytes(8, "little")  # the tensor count
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(bytes(data))
    with pytest.raises(CheckpointError) as e:
        load_model(bad, "cpu")
    assert "corrupt" in one_line(e)


def test_not_a_gguf_file(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"PK\x03\x04 not a gguf" * 10)
    with pytest.raises(CheckpointError, match="is not a GGUF file"):
        load_model(bad, "cpu")
    with pytest.raises(CheckpointError, match="GGUF file not found"):
        load_model(tmp_path / "missing.gguf", "cpu")


def write_raw(path, arch: str, tensors: dict[str, tuple[np.ndarray, gguf.GGMLQuantizationType | None]]):
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    for name, (data, raw) in tensors.items():
        w.add_tensor(name, data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_an_architecture_transformers_cannot_read(tmp_path):
    path = write_raw(tmp_path / "phi2.gguf", "phi2", {"token_embd.weight": (np.zeros((8, 32), np.float32), None)})
    with pytest.raises(CheckpointError) as e:
        load_model(path, "cpu")
    msg = one_line(e)
    assert "'phi2'" in msg and "llama" in msg and "qwen2" in msg and "gpt2" in msg


def test_a_type_transformers_cannot_dequantize(files, tmp_path):
    q = gguf.GGMLQuantizationType.Q8_1
    raw = np.zeros((4, 2 * gguf.GGML_QUANT_SIZES[q][1]), np.uint8)  # 4 rows of 64 values
    path = write_raw(tmp_path / "q81.gguf", "llama", {"token_embd.weight": (raw, q)})
    with pytest.raises(CheckpointError) as e:
        load_model(path, "cpu")
    msg = one_line(e)
    assert "Q8_1" in msg and "cannot dequantize" in msg and "Q8_0" in msg


def test_missing_gguf_package_says_what_to_install(files, monkeypatch):
    monkeypatch.setitem(sys.modules, "gguf", None)  # import gguf fails, as without the extra
    with pytest.raises(CheckpointError) as e:
        load_model(files["llama"], "cpu")
    assert 'pip install "attnscope[gguf]"' in one_line(e) and "gguf" in one_line(e)


def test_too_large_for_the_machine_says_so_before_loading(files, monkeypatch):
    header = gguf_header.read_header(files["llama"])
    need = header.parameters * 4
    monkeypatch.setattr(gguf_file, "available_memory", lambda device: need // 2)
    with pytest.raises(CheckpointError) as e:
        load_model(files["llama"], "cpu")
    msg = one_line(e)
    assert gguf_file.gib(need) in msg and gguf_file.gib(need // 2) in msg and "fp32" in msg
    monkeypatch.setattr(gguf_file, "available_memory", lambda device: need + 1)
    gguf_file.check_memory(header, torch.device("cpu"), "fp32")  # fits: no error


def test_available_memory_reads_meminfo():
    free = gguf_file.available_memory(torch.device("cpu"))
    assert free is None or free > 0


# ------------------------------------------------------------------ Ollama


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("llama3.2", ("registry.ollama.ai", "library", "llama3.2", "latest")),
        ("llama3.2:1b", ("registry.ollama.ai", "library", "llama3.2", "1b")),
        ("someone/model:q4", ("registry.ollama.ai", "someone", "model", "q4")),
        ("hf.co/org/Repo-GGUF:Q4_K_M", ("hf.co", "org", "Repo-GGUF", "Q4_K_M")),
        ("localhost:5000/ns/m", ("localhost:5000", "ns", "m", "latest")),
    ],
)
def test_ollama_names(name, parsed):
    assert parse_name(name) == parsed


def test_a_fake_ollama_folder_resolves_by_name(files, tmp_path, monkeypatch):
    root = ggufkit.ollama_folder(tmp_path / "ollama", files["llama"], name="library/tinyllama", tag="latest")
    ggufkit.ollama_folder(root, files["gpt2"], name="me/tinygpt", tag="f32")
    ggufkit.ollama_folder(root, files["qwen2"], name="org/Qwen-GGUF", tag="F16", host="hf.co")
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    blob = resolve_ollama("tinyllama")
    assert blob.parent == root / "blobs" and blob.read_bytes() == files["llama"].read_bytes()
    assert resolve_ollama("tinyllama:latest") == blob == resolve_ollama("TinyLlama")
    assert resolve_ollama("me/tinygpt:f32").read_bytes() == files["gpt2"].read_bytes()
    assert resolve_ollama("hf.co/org/Qwen-GGUF:F16").read_bytes() == files["qwen2"].read_bytes()
    assert sorted(m.name for m in list_ollama(root)) == [
        "hf.co/org/Qwen-GGUF:F16",
        "me/tinygpt:f32",
        "tinyllama:latest",
    ]
    lm = load_model(blob, "cpu")  # the blob has no .gguf suffix: read as GGUF all the same
    assert lm.facts.name == "tinyllama:latest" and lm.facts.quantization == "Q8_0"


def test_ollama_names_not_pulled_say_what_is(files, tmp_path, monkeypatch):
    root = ggufkit.ollama_folder(tmp_path / "ollama", files["llama"])
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    with pytest.raises(CheckpointError) as e:
        resolve_ollama("llama3.2:1b")
    assert "llama3.2:1b" in one_line(e) and "tinyllama:latest" in one_line(e)
    for blob in (root / "blobs").glob("sha256-*"):  # the blobs gone, the manifest left
        blob.unlink()
    with pytest.raises(CheckpointError, match="blob .* is missing"):
        resolve_ollama("tinyllama")
    with pytest.raises(CheckpointError, match="not an Ollama model name"):
        resolve_ollama("../x")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_bf16_on_cuda_halves_the_weights(files):
    lm = load_model(files["llama"], "cuda", dtype="bf16")
    assert lm.facts.dtype == "bfloat16" and lm.facts.quantization == "Q8_0"
    trace = inspect(lm.backend, None, TEXT)
    # the oracle: transformers' eager attention on the same file, device and dtype (bf16 against fp32
    # differs by up to 0.1 here: rounding, not an error of ours)
    ref, _ = ggufkit.eager_reference(files["llama"], trace.token_ids, dtype=torch.bfloat16, device="cuda")
    assert (trace.pattern.float().cpu() - ref).abs().max() <= 1e-2
    assert {p.dtype for p in lm.model.parameters()} == {torch.bfloat16}  # 2 bytes a parameter, not 4


def test_the_context_of_a_gguf_file_is_read_from_its_metadata(files):
    """The text limit follows the model's context for GGUF files too (their ARCH.context_length)."""
    from attnscope.model.registry import context_tokens

    header = gguf_header.read_header(files["llama"])
    expected = header.metadata["llama.context_length"]
    assert context_tokens(files["llama"]) == expected
    assert context_tokens(files["llama"].parent / "nothing-here.gguf") is None
