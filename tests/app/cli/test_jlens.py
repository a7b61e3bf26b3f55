"""``attnscope jlens`` on the command line, and ``serve --jlens`` reading what it wrote."""

from __future__ import annotations

import pytest
import torch
from attnscope.app.cli.common import Failure
from attnscope.app.cli.main import main
from attnscope.app.cli.serve import preflight
from attnscope.app.settings import Settings
from attnscope.model.atlas.corpus import open_corpus, token_stream
from attnscope.model.jlens.fit import prompt_jacobians, prompts
from attnscope.model.jlens.lensfile import load_lens
from attnscope.model.registry import load_model

from tests.app.cli.test_atlas import corpus_files
from tests.kit.app import build_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return build_checkpoint(tmp_path_factory.mktemp("jlens") / "ckpt")


def test_jlens_writes_the_mean_over_the_corpus(checkpoint, tmp_path, capsys):
    txt, jsonl, _ = corpus_files(tmp_path / "docs")
    out = tmp_path / "lens.pt"
    code = main(["jlens", "--corpus", str(txt), str(jsonl), "--out", str(out), "--checkpoint", str(checkpoint),
                 "--skip-first", "2", "--prompts", "4", "--dim-batch", "5", "--no-progress"])
    assert code == 0
    lens = load_lens(out)
    assert capsys.readouterr().out.strip() == (
        f"attnscope: Jacobian lens of blocks {lens.source_layers} over 4 prompts written to {out}"
    )
    lm = load_model(checkpoint, "cpu")
    assert lens.source_layers == list(range(lm.facts.n_layer - 1)) and lens.n_prompts == 4
    todo = list(prompts(token_stream(open_corpus([txt, jsonl]).documents(), lm.tokenizer), 128, 2))[:4]
    assert len(todo) == 4 and todo[0] == todo[3]  # the .jsonl repeats the .txt's documents
    each = [prompt_jacobians(lm.backend, ids, lens.source_layers, 2, 8) for ids in todo]
    for layer in lens.source_layers:
        mean = torch.stack([j[layer] for j in each]).mean(0)
        assert (lens.J[layer].double() - mean).abs().max() <= 2e-3 * mean.abs().max()
    assert lens.metadata["corpus"]["files"] == ["docs.txt", "docs.jsonl"]
    assert lens.metadata["settings"]["dim_batch"] == 5


@pytest.mark.parametrize(
    "args, words",
    [
        (["--corpus", "missing.txt"], "missing.txt: no such file"),
        (["--layers", "7"], "--layers 7"),
        (["--seq-len", "4", "--skip-first", "4"], "--seq-len 4 must be larger than --skip-first 4"),
        (["--seq-len", "100"], "--seq-len 100: the model reads at most 64 tokens"),
    ],
)
def test_bad_fits_are_one_line(args, words, checkpoint, tmp_path, capsys):
    txt, _, _ = corpus_files(tmp_path / "docs")
    base = ["jlens", "--corpus", str(txt), "--out", str(tmp_path / "l.pt"), "--checkpoint", str(checkpoint)]
    if args[0] == "--corpus":
        base[2] = str(tmp_path / args[1])
        args = []
    assert main([*base, *args, "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1
    assert not (tmp_path / "l.pt").exists()


def test_serve_refuses_a_lens_file_in_one_line(checkpoint, tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"\x00" * 10)
    with pytest.raises(Failure) as e:
        preflight(Settings(checkpoint=checkpoint, device="cpu", jlens=str(bad)))
    assert str(e.value).startswith(f"cannot start: {bad}: not a Jacobian lens file")
    assert "\n" not in str(e.value)
