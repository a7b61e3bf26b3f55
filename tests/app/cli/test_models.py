"""The command line with GGUF files: ``serve``/``inspect`` ``--checkpoint FILE.gguf`` and ``--ollama
NAME[:TAG]``, ``attnscope models``; every bad file is one line and exit status 1."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
from attnscope.app.cli.main import main

from tests.kit.app import free_port, run_cli, serve_process, wait_ready

pytest.importorskip("transformers")
pytest.importorskip("gguf", reason='needs the gguf extra: pip install "attnscope[gguf]"')
pytest.importorskip("accelerate", reason='needs the gguf extra: pip install "attnscope[gguf]"')

import gguf  # noqa: E402
from attnscope.model.sources import (
    gguf_file,  # noqa: E402
    gguf_header,  # noqa: E402
)

from tests.kit import gguf as ggufkit  # noqa: E402

TEXT = "The cat sat on the mat."


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    return ggufkit.write("llama", tmp_path_factory.mktemp("cli-gguf") / "tiny-llama.Q8_0.gguf", "Q8_0")


@pytest.fixture(scope="module")
def ollama_root(llama, tmp_path_factory) -> Path:
    return ggufkit.ollama_folder(tmp_path_factory.mktemp("ollama") / "models", llama, name="library/tinyllama")


def raw_file(path: Path, arch: str, data: np.ndarray, raw=None) -> Path:
    w = gguf.GGUFWriter(str(path), arch)
    w.add_tensor("token_embd.weight", data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def bad_file(case: str, llama: Path, tmp: Path) -> tuple[Path, str]:
    """A bad GGUF file, and what its one line must say."""
    data = llama.read_bytes()
    path = tmp / f"{case.replace(' ', '-')}.gguf"
    if case == "truncated":
        path.write_bytes(data[: len(data) * 3 // 4])
        return path, "truncated"
    if case == "corrupt":
        buf = bytearray(data)
        buf[16:24] = (2**60).to_bytes(8, "little")  # the metadata key count
        path.write_bytes(bytes(buf))
        return path, "corrupt"
    if case == "not gguf":
        path.write_bytes(b"\x00" * 4096)
        return path, "not a GGUF file"
    if case == "architecture":
        return raw_file(path, "phi2", np.zeros((4, 32), np.float32)), "cannot read the GGUF architecture 'phi2'"
    if case == "quantization":
        q = gguf.GGMLQuantizationType.Q8_K
        raw = np.zeros((2, gguf.GGML_QUANT_SIZES[q][1]), np.uint8)
        return raw_file(
            path, "llama", raw, q
        ), "stores tensors as Q8_K (e.g. token_embd.weight), which transformers cannot"
    raise AssertionError(case)


CASES = ["truncated", "corrupt", "not gguf", "architecture", "quantization"]


def one_line_failure(err: str, named: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("attnscope: ") and named in lines[0], lines[0]
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("case", CASES)
def test_serve_with_a_bad_gguf_is_one_line(case, llama, tmp_path, capsys):
    path, says = bad_file(case, llama, tmp_path)
    assert main(["serve", "--checkpoint", str(path), "--port", str(free_port())]) == 1
    captured = capsys.readouterr()
    line = one_line_failure(captured.err, says)
    assert line.startswith("attnscope: cannot start:") and str(path) in line
    assert "http://" not in captured.out


@pytest.mark.parametrize(("case", "command"), [("truncated", "serve"), ("quantization", "inspect")])
def test_a_real_process_says_one_line_and_exits_1(case, command, llama, tmp_path):
    path, says = bad_file(case, llama, tmp_path)
    args = ["serve", "--port", str(free_port())] if command == "serve" else ["inspect", TEXT]
    result = run_cli(*args, "--checkpoint", str(path))
    assert result.returncode == 1
    one_line_failure(result.stderr, says)


def test_without_the_gguf_package_it_says_what_to_install(llama, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "gguf", None)
    assert main(["serve", "--checkpoint", str(llama), "--port", str(free_port())]) == 1
    one_line_failure(capsys.readouterr().err, 'pip install "attnscope[gguf]"')
    assert main(["inspect", "--checkpoint", str(llama), TEXT]) == 1
    one_line_failure(capsys.readouterr().err, 'pip install "attnscope[gguf]"')


def test_too_large_is_refused_before_loading(llama, monkeypatch, capsys):
    need = gguf_header.read_header(llama).parameters * 4
    monkeypatch.setattr(gguf_file, "available_memory", lambda device: 1024**2 // 4)
    assert main(["serve", "--checkpoint", str(llama), "--port", str(free_port())]) == 1
    line = one_line_failure(capsys.readouterr().err, "needs about")
    assert gguf_file.gib(need) in line and "0.0 GiB available" in line and "--dtype bf16" in line


def test_inspect_a_gguf_file_and_an_ollama_name(llama, ollama_root, capsys, monkeypatch):
    assert main(["inspect", "--json", "--checkpoint", str(llama), TEXT]) == 0
    model = json.loads(capsys.readouterr().out)["model"]
    assert (model["source_format"], model["quantization"], model["family"]) == ("gguf", "Q8_0", "llama")
    monkeypatch.setenv("OLLAMA_MODELS", str(ollama_root))
    assert main(["inspect", "--ollama", "tinyllama", TEXT]) == 0
    assert capsys.readouterr().out.startswith("ollama:tinyllama:latest: 3 layers x 6 heads")
    assert main(["inspect", "--checkpoint", str(llama.parent), TEXT]) == 0  # the folder holding it
    assert capsys.readouterr().out.startswith("tiny-llama.Q8_0.gguf: 3 layers")


def test_ollama_errors(ollama_root, llama, capsys, monkeypatch):
    monkeypatch.setenv("OLLAMA_MODELS", str(ollama_root))
    assert main(["serve", "--ollama", "llama3.2:1b", "--port", str(free_port())]) == 1
    line = one_line_failure(capsys.readouterr().err, "no Ollama model llama3.2:1b")
    assert "tinyllama:latest" in line
    assert main(["serve", "--ollama", "tinyllama", "--checkpoint", str(llama)]) == 2
    one_line_failure(capsys.readouterr().err, "give one")


def test_serve_an_ollama_model(ollama_root):
    port = free_port()
    args = ("--ollama", "tinyllama:latest", "--port", str(port))
    with serve_process(*args, env={"OLLAMA_MODELS": str(ollama_root)}) as proc:
        assert f"http://127.0.0.1:{port}/" in proc.stdout.readline()
        wait_ready(proc, port, within=90)
        info = httpx.get(f"http://127.0.0.1:{port}/api/model", timeout=5).json()
        assert (info["name"], info["source_format"], info["quantization"]) == ("tinyllama:latest", "gguf", "Q8_0")


def test_models_lists_ollama_lm_studio_and_a_folder(llama, ollama_root, tmp_path, capsys, monkeypatch):
    home = tmp_path / "home"
    lmstudio = home / ".lmstudio" / "models" / "someone" / "Tiny-GGUF"
    lmstudio.mkdir(parents=True)
    (lmstudio / "tiny.Q8_0.gguf").write_bytes(llama.read_bytes())
    extra = tmp_path / "mine"
    extra.mkdir()
    raw_file(extra / "phi.gguf", "phi2", np.zeros((4, 32), np.float32))
    monkeypatch.setenv("OLLAMA_MODELS", str(ollama_root))
    monkeypatch.setenv("HOME", str(home))
    assert main(["models", "--dir", str(extra)]) == 0
    out = capsys.readouterr().out
    assert "tinyllama:latest" in out and "attnscope serve --ollama tinyllama:latest" in out
    assert f"attnscope serve --checkpoint {lmstudio / 'tiny.Q8_0.gguf'}" in out
    assert "phi.gguf" in out and "cannot read the GGUF architecture" in out
    assert main(["models", "--json", "--dir", str(extra)]) == 0
    data = json.loads(capsys.readouterr().out)
    by_source = {m["source"]: m for m in data["models"]}
    assert by_source["ollama"]["quantization"] == "Q8_0" and by_source["ollama"]["status"] == "ok"
    assert by_source["lm-studio"]["architecture"] == "llama" and by_source["dir"]["status"] != "ok"
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "none"))
    monkeypatch.setenv("HOME", str(tmp_path / "nohome"))
    assert main(["models"]) == 0
    assert "1 model(s)" in capsys.readouterr().out  # only the shipped model (tests/app/cli/test_models_shipped.py)
