"""The ``attnscope`` command line (``python -m attnscope``): serve, inspect, export-hf, train."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from attnscope.app.cli.main import main
from attnscope.app.main import create_app
from attnscope.app.settings import Settings
from attnscope.model.ours.checkpoint import SHIPPED
from attnscope.model.registry import load_model
from fastapi.testclient import TestClient

from tests.kit.app import HEAD_DIM, N_HEAD, N_LAYER, free_port, run_cli, serve_process, wait_ready

REPO = Path(__file__).resolve().parents[3]
TEXT = "The red cat opens the old door. The red cat"


def broken_copy(src: Path, dst: Path, file: str, content: bytes) -> Path:
    shutil.copytree(src, dst)
    (dst / file).write_bytes(content)
    return dst


# ------------------------------------------------------------------ serve: startup faults


BAD_CHECKPOINTS = {
    # case: (file to break or remove, new content or None to remove; None file = no directory)
    "missing directory": (None, None),
    "garbage weights": ("model.safetensors", b"\x00garbage" * 10),
    "truncated config": ("config.json", b'{"n_layer": '),
    "garbage tokenizer": ("tokenizer.json", b"{nope"),
    "weights removed": ("model.safetensors", None),
}


def bad_checkpoint(checkpoint_dir: Path, tmp_path: Path, case: str) -> tuple[Path, str]:
    """A broken checkpoint directory and the path its error message must name."""
    file, content = BAD_CHECKPOINTS[case]
    if file is None:
        path = tmp_path / "no-such-checkpoint"
        return path, str(path)
    path = tmp_path / "ckpt"
    shutil.copytree(checkpoint_dir, path)
    if content is None:
        (path / file).unlink()
    else:
        (path / file).write_bytes(content)
    return path, str(path / file)


@pytest.mark.parametrize("case", list(BAD_CHECKPOINTS))
def test_serve_with_a_bad_checkpoint_fails_with_one_line(checkpoint_dir, tmp_path, capsys, case):
    """Checked before uvicorn starts: one line naming the file, exit status 1."""
    path, named = bad_checkpoint(checkpoint_dir, tmp_path, case)
    assert main(["serve", "--checkpoint", str(path), "--port", str(free_port())]) == 1
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("attnscope: cannot start:")
    assert named in lines[0]
    assert "http://" not in captured.out  # it never got as far as serving


@pytest.mark.parametrize("case", ["missing directory", "garbage weights"])
def test_serve_process_exits_non_zero_with_one_line(checkpoint_dir, tmp_path, case):
    """The same as a real process: nothing else on stderr (no traceback, no warnings)."""
    path, named = bad_checkpoint(checkpoint_dir, tmp_path, case)
    result = run_cli("serve", "--checkpoint", str(path), "--port", str(free_port()), timeout=90)
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("attnscope: cannot start:") and named in lines[0]
    assert result.stdout == ""


def test_lifespan_refuses_a_bad_checkpoint_too(tmp_path):
    """Started by uvicorn directly (no CLI check), the lifespan stops it: one line, non-zero exit."""
    missing = tmp_path / "gone"
    env = {**os.environ, "ATTNSCOPE_CHECKPOINT": str(missing)}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "attnscope.app.main:create_app_from_env",
            "--factory",
            "--port",
            str(free_port()),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    failures = [line for line in result.stderr.splitlines() if "cannot start" in line]
    assert failures and str(missing) in failures[0]


def test_create_app_with_a_bad_checkpoint_fails_at_startup(tmp_path):
    app = create_app(Settings(checkpoint=tmp_path / "gone"))
    with pytest.raises(Exception, match="gone"), TestClient(app):
        pass


# ------------------------------------------------------------------ serve: running


def test_serve_prints_the_url_and_serves(checkpoint_dir):
    port = free_port()
    with serve_process("--checkpoint", str(checkpoint_dir), "--port", str(port)) as proc:
        first = proc.stdout.readline()
        assert f"http://127.0.0.1:{port}/" in first
        wait_ready(proc, port, within=60)
        info = httpx.get(f"http://127.0.0.1:{port}/api/model", timeout=5).json()
        assert info["n_layer"] == N_LAYER
        r = httpx.post(f"http://127.0.0.1:{port}/api/attention", json={"text": TEXT}, timeout=30)
        assert r.status_code == 200
        assert "server" not in r.headers  # no server banner


@pytest.fixture
def busy_port():
    """A port another server is listening on (held open for the test)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]


def test_serve_on_a_busy_port_is_one_line_before_the_model_loads(checkpoint_dir, busy_port, capsys, monkeypatch):
    from attnscope.model import registry

    def must_not_load(*args, **kwargs):
        raise AssertionError("the model was loaded before the port was checked")

    monkeypatch.setattr(registry, "load_model", must_not_load)
    monkeypatch.setattr(registry, "read_config", must_not_load)
    assert main(["serve", "--port", str(busy_port), "--checkpoint", str(checkpoint_dir)]) == 1
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        f"attnscope: port {busy_port} on 127.0.0.1 is in use; pick another with --port"
    ]
    assert captured.out == ""  # no address printed for a server that never starts


def test_serve_process_on_a_busy_port_exits_1_with_one_line(busy_port, checkpoint_dir):
    result = run_cli("serve", "--port", str(busy_port), "--checkpoint", str(checkpoint_dir), timeout=60)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"attnscope: port {busy_port} on 127.0.0.1 is in use; pick another with --port"
    ]
    assert result.stdout == ""


def test_serve_a_missing_checkpoint_on_a_busy_port_names_the_checkpoint(busy_port, tmp_path):
    """A real process: what was typed is checked before the port, so the line names what to fix first."""
    missing = tmp_path / "none"
    result = run_cli("serve", "--port", str(busy_port), "--checkpoint", str(missing), timeout=60)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [f"attnscope: cannot start: --checkpoint {missing}: no such file or folder"]
    assert result.stdout == ""


def test_serve_on_an_address_that_is_not_ours_names_the_host(checkpoint_dir, capsys):
    assert main(["serve", "--host", "192.0.2.1", "--port", str(free_port()), "--checkpoint", str(checkpoint_dir)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "192.0.2.1" in err[0] and "--host" in err[0]


@pytest.fixture
def no_cuda(monkeypatch):
    """This machine as one without a GPU, whatever it has."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("ATTNSCOPE_DEVICE", raising=False)


@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_serve_with_cuda_asked_for_but_absent_is_one_line(checkpoint_dir, capsys, no_cuda, device):
    args = ["serve", "--device", device, "--port", str(free_port()), "--checkpoint", str(checkpoint_dir)]
    assert main(args) == 1
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"attnscope: cannot start: --device {device}: CUDA is not available")
    assert "--device cpu" in lines[0]
    assert "http://" not in captured.out


def test_serve_compile_without_a_compiler_is_one_line_before_loading(checkpoint_dir, capsys, monkeypatch, tmp_path):
    """``--compile`` on a machine with no C compiler (the slim Docker image): refused before any weights load."""
    from attnscope.app.cli import serve

    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no cc, gcc or clang
    monkeypatch.setattr(serve, "run", lambda *args: pytest.fail("served"))
    args = ["serve", "--compile", "--port", str(free_port()), "--checkpoint", str(checkpoint_dir)]
    assert main(args) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnscope: cannot start: --compile needs a C/C++ compiler")


def test_inspect_with_cuda_asked_for_but_absent_is_one_line(checkpoint_dir, capsys, no_cuda, monkeypatch):
    assert main(["inspect", TEXT, "--device", "cuda", "--checkpoint", str(checkpoint_dir)]) == 1
    captured = capsys.readouterr()
    assert len(captured.err.splitlines()) == 1 and "--device cuda: CUDA is not available" in captured.err
    assert captured.out == ""
    # set in the environment, the line names the variable
    monkeypatch.setenv("ATTNSCOPE_DEVICE", "cuda")
    assert main(["inspect", TEXT, "--checkpoint", str(checkpoint_dir)]) == 1
    assert "ATTNSCOPE_DEVICE cuda: CUDA is not available" in capsys.readouterr().err
    # auto still means the CPU when there is no GPU, silently
    monkeypatch.setenv("ATTNSCOPE_DEVICE", "auto")
    assert main(["inspect", TEXT, "--checkpoint", str(checkpoint_dir)]) == 0
    captured = capsys.readouterr()
    assert "on cpu" in captured.out.splitlines()[0] and captured.err == ""


def test_serve_binds_localhost_by_default():
    assert Settings().host == "127.0.0.1"


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA")
def test_cuda_asked_for_but_absent_falls_back_to_cpu(checkpoint_dir, caplog):
    with caplog.at_level("WARNING"), TestClient(create_app(Settings(checkpoint=checkpoint_dir, device="cuda"))) as c:
        assert c.get("/api/model").json()["device"] == "cpu"
        assert c.post("/api/attention", json={"text": TEXT}).status_code == 200
    assert any("CUDA" in record.getMessage() for record in caplog.records)


# ------------------------------------------------------------------ inspect


def test_inspect_prints_a_summary(checkpoint_dir, capsys):
    assert main(["inspect", TEXT, "--checkpoint", str(checkpoint_dir), "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    lm = load_model(checkpoint_dir, "cpu")
    enc = lm.tokenizer.encode(TEXT)
    assert f"{len(enc.ids)} tokens: " + " | ".join(enc.tokens) in out
    assert "next-token guesses" in out
    rows = [
        line.split()
        for line in out.splitlines()
        if line.strip() and line.split()[0].isdigit() and len(line.split()) == 7
    ]
    assert [(int(r[0]), int(r[1])) for r in rows] == [
        (layer, head) for layer in range(N_LAYER) for head in range(N_HEAD)
    ]
    assert all(float(r[6]) == pytest.approx(HEAD_DIM, rel=1e-3) for r in rows)  # variance ratio = d_k


def test_inspect_one_head(checkpoint_dir, capsys):
    assert main(["inspect", TEXT, "--checkpoint", str(checkpoint_dir), "--layer", "1", "--head", "0"]) == 0
    out = capsys.readouterr().out
    rows = [
        line.split()
        for line in out.splitlines()
        if line.strip() and line.split()[0].isdigit() and len(line.split()) == 7
    ]
    assert [(int(r[0]), int(r[1])) for r in rows] == [(1, 0)]


def test_inspect_json_is_the_api_response(checkpoint_dir, capsysbinary):
    args = ["inspect", TEXT, "--json", "--checkpoint", str(checkpoint_dir), "--device", "cpu", "--layer", "1"]
    args += ["--include", "pattern,attn_scores,stats", "--top-k", "3"]
    assert main(args) == 0
    cli_bytes = capsysbinary.readouterr().out.strip()
    body = {"text": TEXT, "layers": [1], "include": ["pattern", "attn_scores", "stats"], "top_k": 3}
    with TestClient(create_app(Settings(checkpoint=checkpoint_dir, device="cpu"))) as c:
        api_bytes = c.post("/api/attention", json=body).content
    assert cli_bytes.rsplit(b',"timing_ms":', 1)[0] == api_bytes.rsplit(b',"timing_ms":', 1)[0]
    assert json.loads(cli_bytes)["layers"][0]["layer"] == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["   "], "the text: "),
        (["ok", "--layer", "9"], f"--layer 9: the model has {N_LAYER} layers (0 to {N_LAYER - 1})"),
        (["ok", "--layer", "-1"], "--layer -1: "),
        (["ok", "--head", "-1"], "--head -1: "),
        (["ok", "--head", str(N_HEAD)], f"--head {N_HEAD}: the model has {N_HEAD} heads"),
        (["ok", "--include", "pattern,nothing"], "--include pattern,nothing: "),
        (["ok", "--top-k", "-1"], "--top-k -1: "),
        (["ok", "--temperature", "0"], "--temperature 0: "),  # as typed, not as parsed (0.0)
        (["ok", "--temperature", "-0.50"], "--temperature -0.50: "),
        (["ok", "--scale", "-3"], "--scale -3: "),
        (["ok", "--device-map", "nonsense"], "--device-map nonsense: use auto, "),
        (["the cat " * 40], "the text: "),
    ],
)
def test_inspect_bad_input_is_one_line_naming_the_option(checkpoint_dir, capsys, args, message):
    code = main(["inspect", *args, "--checkpoint", str(checkpoint_dir)])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"attnscope: {message}"), err
    for api_name in ("layers", "heads", "top_k", "include.", "body"):  # the API's names, not the options
        assert api_name not in err[0].split(": ", 2)[1]
    assert "Value error" not in err[0]  # pydantic's word for a validator's message


def test_inspect_an_over_long_text_says_how_many_tokens_and_the_limit(checkpoint_dir, capsys):
    lm = load_model(checkpoint_dir, "cpu")
    text = "the cat " * 40
    n = len(lm.tokenizer.encode_ids(text))
    assert n > lm.facts.block_size
    assert main(["inspect", text, "--checkpoint", str(checkpoint_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("attnscope: the text: "), err
    assert f"{n} tokens" in err[0] and f"{lm.facts.block_size} tokens" in err[0], err


def test_inspect_of_a_transformers_model_prints_no_progress_bar_or_warning(tmp_path):
    """A real process: stdout is the summary, stderr empty (no "Loading weights" bar, no library warning)."""
    pytest.importorskip("transformers")
    from tests.kit.family import build

    model = build("gpt2", tmp_path / "tiny-gpt2")
    result = run_cli("inspect", TEXT, "--checkpoint", str(model), "--device", "cpu", timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.startswith("tiny-gpt2: ")


@pytest.mark.parametrize(
    ("args", "option"),
    [(["inspect", "ok", "--head", "abc"], "--head"), (["serve", "--port", "http"], "--port"), (["nothing"], "")],
)
def test_argument_errors_are_one_line(capsys, args, option):
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("attnscope: ") and option in err[0] and "--help" in err[0]


@pytest.mark.parametrize(
    ("args", "what_if", "ratio"),
    [
        ([], None, HEAD_DIM),
        (["--scale", "sqrt_dk"], None, HEAD_DIM),  # this model's own divisor is √d_k
        (["--no-causal"], "what-if: causal mask removed", HEAD_DIM),
        (["--scale", "none"], f"what-if: scores divided by 1 instead of the model's √{HEAD_DIM} = 4", 1),
        (["--scale", "2"], f"what-if: scores divided by 2 instead of the model's √{HEAD_DIM} = 4", 4),
        (
            ["--no-causal", "--scale", "none"],
            "what-if: causal mask removed (each token also sees the ones after it); scores divided by 1",
            1,
        ),
    ],
)
def test_inspect_says_which_what_ifs_it_ran(checkpoint_dir, capsys, args, what_if, ratio):
    assert main(["inspect", TEXT, "--checkpoint", str(checkpoint_dir), "--device", "cpu", *args]) == 0
    out = capsys.readouterr().out.splitlines()
    marked = [line for line in out if line.startswith("what-if:")]
    if what_if is None:
        assert marked == []
    else:
        assert len(marked) == 1 and marked[0].startswith(what_if) and marked[0].endswith("(not the model as trained)")
        assert out.index(marked[0]) == 1  # right under the model line, before any number
    rows = [line.split() for line in out if line.strip() and line.split()[0].isdigit() and len(line.split()) == 7]
    assert rows and all(float(r[6]) == pytest.approx(ratio, rel=1e-3) for r in rows)  # var ratio = divisor²


def test_inspect_missing_checkpoint(tmp_path, capsys):
    assert main(["inspect", "hello", "--checkpoint", str(tmp_path / "none")]) == 1
    err = capsys.readouterr().err.strip()
    assert str(tmp_path / "none") in err and len(err.splitlines()) == 1


# ------------------------------------------------------------------ export-hf and train


def test_export_hf_round_trips(checkpoint_dir, tmp_path, capsys):
    out = tmp_path / "hf"
    assert main(["export-hf", str(out), "--checkpoint", str(checkpoint_dir)]) == 0
    assert str(out) in capsys.readouterr().out
    assert json.loads((out / "config.json").read_text())["model_type"] == "gpt2"
    ours = load_model(checkpoint_dir, "cpu")
    back = load_model(out, "cpu")  # our loader reads the Hugging Face format too
    ids = ours.tokenizer.encode_ids(TEXT)
    assert back.tokenizer.encode_ids(TEXT) == ids
    import torch

    x = torch.tensor([ids])
    with torch.inference_mode():
        assert torch.allclose(ours.model(x)[0], back.model(x)[0], atol=1e-5)


@pytest.mark.parametrize("named", [None, "my edit"])
def test_an_exported_copy_is_served_under_its_own_name(checkpoint_dir, tmp_path, capsys, named):
    """The copy is what was exported (a folder one may edit), not the model it came from: attnscope
    shows it as ``--name``, else as its folder's name."""
    out = tmp_path / "edited-copy"
    name = ["--name", named] if named else []
    assert main(["export-hf", str(out), "--checkpoint", str(checkpoint_dir), *name]) == 0
    capsys.readouterr()
    expected = named or out.name
    assert json.loads((out / "config.json").read_text())["attnscope_name"] == expected
    with TestClient(create_app(Settings(checkpoint=out, device="cpu", torch_threads=1))) as c:
        original = load_model(checkpoint_dir, "cpu").facts.name
        served = c.get("/api/model").json()["name"]
    assert served == expected != original


def test_train_passes_its_arguments_through(monkeypatch):
    from attnscope.model.ours import train

    seen = []
    monkeypatch.setattr(train, "main", lambda argv=None, prog=None, parser=None: seen.append(argv))
    assert main(["train", "--preset", "tiny", "--max-steps", "3", "--out", "/tmp/x"]) == 0
    assert seen == [["--preset", "tiny", "--max-steps", "3", "--out", "/tmp/x"]]


def test_train_help_is_model_train(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--preset" in out and "--max-steps" in out


def test_help_lists_the_subcommands():
    result = run_cli("--help", timeout=60)
    assert result.returncode == 0
    for command in ("serve", "train", "inspect", "export-hf"):
        assert command in result.stdout


# ------------------------------------------------------------------ the shipped model


@pytest.mark.skipif(not (SHIPPED / "model.safetensors").is_file(), reason="the shipped checkpoint is not there yet")
def test_default_settings_serve_the_shipped_model(monkeypatch):
    for var in ("ATTNSCOPE_CHECKPOINT", "ATTNSCOPE_DEVICE"):
        monkeypatch.delenv(var, raising=False)
    settings = Settings(torch_threads=1)
    assert settings.checkpoint_path == SHIPPED
    with TestClient(create_app(settings)) as c:
        info = c.get("/api/model").json()
        assert (info["n_layer"], info["n_head"], info["d_model"], info["head_dim"]) == (4, 4, 128, 32)
        assert (info["block_size"], info["vocab_size"]) == (256, 4096)
        lm = c.app.state.attnscope.service.loaded
        ids = lm.tokenizer.encode_ids("The cat sat on the mat. " * 80)[:256]
        text = lm.tokenizer.decode(ids)
        n = len(lm.tokenizer.encode_ids(text))
        r = c.post("/api/attention", json={"text": text, "include": ["stats"], "layers": [0], "heads": [0]})
        assert r.status_code == (200 if n <= 256 else 422)
        if r.status_code == 200:
            assert r.json()["layers"][0]["heads"][0]["stats"]["variance_ratio"] == pytest.approx(32, rel=1e-3)
        longer = lm.tokenizer.decode(lm.tokenizer.encode_ids("The cat sat on the mat. " * 80))
        r = c.post("/api/attention", json={"text": longer})
        assert r.status_code == 422
        assert r.json()["detail"][0]["ctx"]["limit"] == 256
        scores = c.get("/api/heads").json()["scores"]
        assert len(scores) == 4 and all(len(layer) == 4 for layer in scores)


def test_train_help_names_the_subcommand(capsys):
    with pytest.raises(SystemExit) as info:
        main(["train", "--help"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith("usage: attnscope train")


def test_train_without_a_corpus_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["train", "--preset", "tiny", "--corpus", str(tmp_path / "none"), "--out", str(tmp_path / "run")])
    assert info.value.code == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no corpus" in err and "model.ours.corpus" in err


def test_train_on_an_empty_corpus_is_one_line(tmp_path, capsys):
    empty = tmp_path / "corpus"
    empty.mkdir()
    for name in ("train.txt", "val.txt"):
        (empty / name).write_text("")
    with pytest.raises(SystemExit) as info:
        main(["train", "--preset", "tiny", "--corpus", str(empty), "--out", str(tmp_path / "run")])
    assert info.value.code == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is empty" in err and "model.ours.corpus" in err
    assert not (tmp_path / "run").exists()


def test_export_hf_files_follow_the_umask(checkpoint_dir, tmp_path):
    import os

    old = os.umask(0o022)
    try:
        assert main(["export-hf", str(tmp_path / "out"), "--checkpoint", str(checkpoint_dir)]) == 0
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "out").iterdir()}
    assert modes["model.safetensors"] == 0o644 == modes["config.json"]


# ------------------------------------------------------------------ what a new user mistypes, as a real process


def one_line_naming(result: subprocess.CompletedProcess, code: int, *named: str) -> str:
    """The process exited ``code`` with one ``attnscope:`` line on stderr naming each of ``named``."""
    lines = result.stderr.splitlines()
    assert result.returncode == code, (result.returncode, result.stderr)
    assert len(lines) == 1 and lines[0].startswith("attnscope: "), lines
    for part in named:
        assert part in lines[0], (part, lines[0])
    return lines[0]


@pytest.mark.parametrize(
    ("args", "code", "named"),
    [
        (["train", "--preset", "huge"], 2, ["--preset", "huge", "tiny"]),
        (["serve", "--port", "70000"], 2, ["--port 70000", "65535"]),
        (
            ["serve", "--checkpoint", "/nonexistent/dir", "--port", str(free_port())],
            1,
            ["--checkpoint /nonexistent/dir: no such file or folder"],
        ),
        (["inspect", "hi", "--checkpoint", "/nonexistent/dir"], 1, ["--checkpoint /nonexistent/dir: no such"]),
        (["models", "--dir", "/nonexistent"], 1, ["--dir /nonexistent: no such folder"]),
    ],
    ids=["train preset", "serve port too big", "serve no checkpoint", "inspect no checkpoint", "models dir"],
)
def test_a_mistyped_command_is_one_line_naming_the_option(args, code, named, tmp_path):
    result = run_cli(*args, env={"HF_HUB_CACHE": str(tmp_path / "hub"), "HOME": str(tmp_path)}, timeout=90)
    one_line_naming(result, code, *named)
    assert result.stdout == ""


def test_a_hub_name_with_no_network_is_our_line_not_the_hubs(tmp_path):
    """Not in the cache, HF_HUB_OFFLINE unset and the Hub out of reach (a closed port stands in for no
    network): one line in attnscope's words, none of huggingface_hub's exception text."""
    env = {"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "", "HF_ENDPOINT": "http://127.0.0.1:9"}
    result = run_cli("inspect", "hi", "--model", "tiny-org/not-here", env=env, timeout=90)
    line = one_line_naming(result, 1, "cannot download tiny-org/not-here", "cannot be reached", "hf download")
    for raw in ("Error", "Errno", "snapshot folder", "Got:"):
        assert raw not in line, line


def test_every_option_of_every_command_says_what_it_is():
    """`attnscope COMMAND --help` explains each option (and argument) it lists."""
    import argparse

    from attnscope.app.cli.main import build_parser
    from attnscope.model.ours import train

    made = []

    class Kept(argparse.ArgumentParser):  # train builds its own parser: keep it to read its options
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    with pytest.raises(SystemExit), contextlib.redirect_stdout(io.StringIO()):
        train.main(["--help"], prog="attnscope train", parser=Kept)
    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    parsers = {**commands.choices, "train": made[0]}
    bare = [
        f"{name} {' '.join(action.option_strings) or action.dest}"
        for name, parser in parsers.items()
        for action in parser._actions
        if not action.help
    ]
    assert commands.choices and not bare, bare
