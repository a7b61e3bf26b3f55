"""``attnscope``: serve the app, train, inspect a text, export to Hugging Face format.

    attnscope serve [--host 127.0.0.1] [--port 8000] [--checkpoint DIR] [--device cpu] [--workers 1]
    attnscope train [--preset small ...]          (arguments go to model.train)
    attnscope inspect "The cat sat on the mat." [--json] [--layer L] [--head H] [--checkpoint DIR]
    attnscope export-hf OUT_DIR [--checkpoint DIR]
    attnscope serve --checkpoint FILE.gguf | --ollama NAME[:TAG]    (a GGUF model, dequantized)
    attnscope models [--dir DIR]                  (the GGUF models on this machine)

Also ``python -m attnscope ...``. Settings not given as options come from ``ATTNSCOPE_*``
variables (see :mod:`app.settings`). Errors are one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import orjson
from pydantic import ValidationError

EXIT_USAGE = 2
EXIT_FAILED = 1


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _fail(msg: str, code: int = EXIT_FAILED) -> int:
    print(f"attnscope: {_one_line(Exception(msg))}", file=sys.stderr)
    return code


def _validation_message(err: ValidationError) -> str:
    from .errors import clean_validation_errors

    parts = []
    for item in clean_validation_errors(err.errors()):
        loc = ".".join(str(p) for p in item["loc"] if p != "body")
        parts.append(f"{loc}: {item['msg']}" if loc else item["msg"])
    return "; ".join(parts)


def _scale(value: str) -> str | float:
    if value in ("model", "sqrt_dk", "none"):
        return value
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"scale must be 'model', 'sqrt_dk', 'none' or a number, got {value!r}"
        ) from None


# ------------------------------------------------------------------ serve


def cmd_serve(args: argparse.Namespace) -> int:
    from ..model.checkpoint import CheckpointError, pick_device, read_config
    from ..model.registry import family_of, load_model
    from .cli_gguf import UsageError, ollama_checkpoint
    from .settings import Settings

    try:
        args.checkpoint = ollama_checkpoint(args)  # --ollama NAME: the model blob Ollama pulled
    except UsageError as e:
        return _fail(str(e), EXIT_USAGE)
    except CheckpointError as e:
        return _fail(f"cannot start: {e}")
    options = {
        "host": args.host,
        "port": args.port,
        "checkpoint": args.checkpoint,
        "device": args.device,
        "dtype": args.dtype,
    }
    try:
        settings = Settings(**{k: v for k, v in options.items() if v is not None})
    except ValidationError as e:
        return _fail(f"invalid setting: {_validation_message(e)}", EXIT_USAGE)
    if args.workers < 1:
        return _fail("--workers must be at least 1", EXIT_USAGE)

    # fail before uvicorn starts: one line naming the file, non-zero exit
    try:
        device = pick_device(settings.device)
        if settings.dtype != "fp32" and device.type == "cpu":
            raise CheckpointError(f"--dtype {settings.dtype} needs a GPU; on the CPU attnscope runs fp32")
        # ours loads in milliseconds: a full check; a transformers model is opened once, by the
        # server, after the checks that need no weights
        from ..model.gguf_file import find_gguf
        from ..model.gguf_file import preflight as gguf_preflight

        gguf = find_gguf(settings.checkpoint_path)
        if gguf is not None:  # header, architecture, tensor types, packages, memory: no weights read
            gguf_preflight(gguf, device, settings.dtype)
        elif family_of(read_config(settings.checkpoint_path)) == "attnscope":
            load_model(settings.checkpoint_path, "cpu")
        else:
            from ..model.hf_backend import preflight

            preflight(Path(settings.checkpoint_path))
    except CheckpointError as e:
        return _fail(f"cannot start: {e}")

    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(levelname)s:     %(message)s")
    shown_host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    if ":" in shown_host:
        shown_host = f"[{shown_host}]"
    print(f"attnscope: open http://{shown_host}:{settings.port}/ in a browser (Ctrl+C stops the server)", flush=True)
    common = {"host": settings.host, "port": settings.port, "server_header": False, "log_level": "info"}
    if args.workers > 1:
        # each worker process builds its own app from the environment
        env = {"checkpoint": str(settings.checkpoint_path), "device": settings.device, "dtype": settings.dtype}
        for key, value in env.items():
            if value is not None:
                os.environ[f"ATTNSCOPE_{key.upper()}"] = value
        uvicorn.run("attnscope.app.main:create_app_from_env", factory=True, workers=args.workers, **common)
    else:
        from .main import create_app

        uvicorn.run(create_app(settings), **common)
    return 0


# ------------------------------------------------------------------ inspect


def _summary(data: dict, layer: int | None, head: int | None, width: int = 3) -> str:
    model = data["model"]
    tokens = data["tokens"]
    lines = [
        f"{model['checkpoint']}: {model['n_layer']} layers x {model['n_head']} heads, head_dim {model['head_dim']}, "
        f"context {model['block_size']} tokens, on {model['device']}",
        f"{len(tokens)} tokens: " + " | ".join(tokens),
        "",
        f"next-token guesses (top {width} after each position):",
    ]
    label_width = min(16, max(len(t) for t in tokens))
    for i, (tok, preds) in enumerate(zip(tokens, data["predictions"])):
        guesses = "  ".join(f"{p['token']} {100 * p['prob']:.1f}%" for p in preds[:width])
        lines.append(f"  {i:4d} {tok[:label_width]:<{label_width}} -> {guesses}")
    lines += [
        "",
        "per head: mean row entropy in nats (scaled, unscaled), mean max weight, var(raw) / var(scaled)",
        f"  {'layer':>5} {'head':>4} {'entropy':>8} {'unscaled':>9} {'max_w':>7} {'unscaled':>9} {'var_ratio':>10}",
    ]
    for lv in data["layers"]:
        for hv in lv["heads"]:
            s = hv["stats"]
            ratio = "undefined" if s["variance_ratio"] is None else f"{s['variance_ratio']:.2f}"  # 0 / 0: one token
            lines.append(
                f"  {lv['layer']:>5} {hv['head']:>4} {s['entropy']:>8.3f} {s['entropy_unscaled']:>9.3f} "
                f"{s['max_weight']:>7.3f} {s['max_weight_unscaled']:>9.3f} {ratio:>10}"
            )
    if layer is not None or head is not None:
        lines.append(f"  (layer {layer if layer is not None else 'all'}, head {head if head is not None else 'all'})")
    lines.append(f"\n{data['timing_ms']:.1f} ms")
    return "\n".join(lines)


def cmd_inspect(args: argparse.Namespace) -> int:
    from ..model.checkpoint import CheckpointError
    from ..model.registry import load_model
    from .cli_gguf import UsageError, ollama_checkpoint
    from .errors import ApiError
    from .schemas import DEFAULT_INCLUDE, attention_request_model
    from .service import attention_json, build_service
    from .settings import Settings

    try:
        args.checkpoint = ollama_checkpoint(args)  # --ollama NAME: the model blob Ollama pulled
    except UsageError as e:
        return _fail(str(e), EXIT_USAGE)
    except CheckpointError as e:
        return _fail(str(e))
    try:
        options = {"checkpoint": args.checkpoint, "device": args.device, "dtype": args.dtype}
        settings = Settings(**{k: v for k, v in options.items() if v})
    except ValidationError as e:
        return _fail(f"invalid setting: {_validation_message(e)}", EXIT_USAGE)
    include = args.include.split(",") if args.include else list(DEFAULT_INCLUDE)
    if not args.json and "stats" not in include:
        include.append("stats")
    request = {
        "text": args.text,
        "layers": None if args.layer is None else [args.layer],
        "heads": None if args.head is None else [args.head],
        "include": include,
        "causal": not args.no_causal,
        "scale": args.scale,
        "top_k": args.top_k,
        "temperature": args.temperature,
    }
    try:
        req = attention_request_model(settings.max_text_chars).model_validate(request)
    except ValidationError as e:
        return _fail(_validation_message(e), EXIT_USAGE)
    try:
        lm = load_model(settings.checkpoint_path, settings.device, settings.dtype)
    except CheckpointError as e:
        return _fail(str(e))
    svc = build_service(lm, with_heads=False)
    try:
        body, _ = attention_json(svc, req)
    except ApiError as e:
        return _fail(f"{'.'.join(str(p) for p in e.detail[0]['loc'][1:])}: {e}", EXIT_USAGE)
    if args.json:
        sys.stdout.buffer.write(body + b"\n")
        sys.stdout.flush()
    else:
        print(_summary(orjson.loads(body), args.layer, args.head, width=min(3, max(1, args.top_k))))
    return 0


# ------------------------------------------------------------------ export-hf


def cmd_export_hf(args: argparse.Namespace) -> int:
    from ..model.backends import OursBackend
    from ..model.checkpoint import SHIPPED, CheckpointError
    from ..model.hf import export_hf
    from ..model.registry import load_model

    source = args.checkpoint or os.environ.get("ATTNSCOPE_CHECKPOINT") or SHIPPED
    try:
        lm = load_model(source, "cpu")
    except CheckpointError as e:
        return _fail(str(e))
    if not isinstance(lm.backend, OursBackend):
        return _fail(
            f"export-hf writes our own GPT; {source} is a {lm.facts.family} model already in transformers format"
        )
    try:
        out = export_hf(lm.model, lm.tokenizer, Path(args.dir))
    except (OSError, ValueError) as e:
        return _fail(f"cannot export to {args.dir}: {e}")
    print(f"attnscope: exported {source} to {out} (Hugging Face GPT-2 format)")
    return 0


# ------------------------------------------------------------------ entry point


def build_parser() -> argparse.ArgumentParser:
    from .cli_gguf import add_models_command, add_ollama_option

    ap = argparse.ArgumentParser(
        prog="attnscope",
        description="See attention in a causal transformer: our small GPT, or any local transformers model.",
    )
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the web app and JSON API")
    serve.add_argument("--host", help="address to bind (default 127.0.0.1; 0.0.0.0 to listen on every interface)")
    serve.add_argument("--port", type=int, help="default 8000")
    serve.add_argument("--checkpoint", help="checkpoint directory or .gguf file (default: the shipped model)")
    add_ollama_option(serve)
    serve.add_argument("--device", help="cpu, cuda, cuda:N or auto")
    serve.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), help="default fp32; bf16/fp16 on a GPU")
    serve.add_argument("--workers", type=int, default=1, help="worker processes (each loads the model)")
    serve.set_defaults(func=cmd_serve)

    sub.add_parser(
        "train", help="train a model (arguments go to python -m attnscope.model.train; see attnscope train -h)"
    )

    ins = sub.add_parser("inspect", help="run a text through the model and summarise what each head does")
    ins.add_argument("text")
    ins.add_argument("--json", action="store_true", help="print the JSON of POST /api/attention instead")
    ins.add_argument("--checkpoint", help="checkpoint directory or .gguf file (default: the shipped model)")
    add_ollama_option(ins)
    ins.add_argument("--device", help="cpu, cuda, cuda:N or auto")
    ins.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), help="default fp32; bf16/fp16 on a GPU")
    ins.add_argument("--layer", type=int, help="only this layer")
    ins.add_argument("--head", type=int, help="only this head (in each layer shown)")
    ins.add_argument("--include", help="comma-separated fields (default pattern,stats)")
    ins.add_argument("--no-causal", action="store_true", help="what-if: remove the causal mask")
    ins.add_argument(
        "--scale", type=_scale, default="model", help="model (its own divisor, default), sqrt_dk, none or a number"
    )
    ins.add_argument("--top-k", type=int, default=5)
    ins.add_argument("--temperature", type=float, default=1.0)
    ins.set_defaults(func=cmd_inspect)

    exp = sub.add_parser("export-hf", help="write the model in Hugging Face GPT-2 format")
    exp.add_argument("dir", help="output directory")
    exp.add_argument("--checkpoint", help="checkpoint directory (default: the shipped model)")
    exp.set_defaults(func=cmd_export_hf)

    add_models_command(sub)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "train":
        from ..model.train import main as train_main

        train_main(argv[1:], prog="attnscope train")
        return 0
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:
        # the reader went away (`attnscope inspect ... | head`): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
