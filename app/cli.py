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
import errno
import logging
import math
import os
import re
import socket
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


class _Parser(argparse.ArgumentParser):
    """argparse with its errors on one line (no usage block), exit status 2."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"attnscope: {_one_line(Exception(message))} (see {self.prog} --help)\n")


def _validation_message(err: ValidationError) -> str:
    from .errors import clean_validation_errors

    parts = []
    for item in clean_validation_errors(err.errors()):
        loc = ".".join(str(p) for p in item["loc"] if p != "body")
        parts.append(f"{loc}: {item['msg']}" if loc else item["msg"])
    return "; ".join(parts)


# the request field each ``inspect`` option fills: errors name the option, as typed
INSPECT_FLAGS = {
    "text": "the text",
    "layers": "--layer",
    "heads": "--head",
    "include": "--include",
    "causal": "--no-causal",
    "scale": "--scale",
    "top_k": "--top-k",
    "temperature": "--temperature",
}


def _flag_message(loc: Sequence, msg: str, args: argparse.Namespace) -> str:
    """``(["heads", 0], "heads[0] is 9; the model has 4 heads ...")`` -> ``"--head 9: the model has 4 heads ..."``."""
    field = str(loc[0]) if loc else ""
    flag = INSPECT_FLAGS.get(field)
    if flag is None:
        return f"{'.'.join(map(str, loc))}: {msg}" if loc else msg
    msg = re.sub(r"^\w+(\[\d+\])? is [^;]*; ", "", msg)  # the API's "heads[0] is 9; " says what the flag says
    msg = msg[:1].lower() + msg[1:]
    value = {
        "layers": args.layer,
        "heads": args.head,
        "include": args.include,
        "scale": args.scale,
        "top_k": args.top_k,
        "temperature": args.temperature,
    }.get(field)
    return f"{flag} {value}: {msg}" if value is not None else f"{flag}: {msg}"


def _inspect_validation_message(err: ValidationError, args: argparse.Namespace) -> str:
    from .errors import clean_validation_errors

    items = clean_validation_errors(err.errors())
    return "; ".join(_flag_message([p for p in it["loc"] if p != "body"], it["msg"], args) for it in items)


def _device_problem(device: str | None, given: bool) -> str | None:
    """Why the device asked for cannot be used here (one line), or None. Asked for by name, a
    missing GPU is an error on the command line; ``auto`` still means the CPU when there is none."""
    from ..model.checkpoint import CheckpointError, pick_device

    try:
        pick_device(device, strict=True)
    except CheckpointError as e:
        source = "--device" if given else "ATTNSCOPE_DEVICE"
        hint = "; use --device cpu, or --device auto for a GPU when there is one" if "CUDA" in str(e) else ""
        return f"{source} {device}: {e}{hint}"
    return None


def _port_problem(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on now (one line naming the option to change), or None.

    Bound the way uvicorn binds (``SO_REUSEADDR``, IPv6 for a host with a colon) and closed at
    once, so a port held by another server fails here, before the model is loaded.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
    except socket.gaierror as e:
        return f"cannot listen on {host}: the name does not resolve ({e.strerror}); pick another with --host"
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            return f"port {port} on {host} is in use; pick another with --port"
        if e.errno == errno.EACCES:
            return f"port {port} on {host} needs privileges this user lacks; pick one above 1023 with --port"
        if e.errno == errno.EADDRNOTAVAIL:
            return f"{host} is not an address of this machine; pick another with --host"
        return f"cannot listen on port {port} on {host}: {e.strerror or e}; check --host and --port"
    return None


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
    # a busy port is found before the model is loaded, and said in one line
    problem = _port_problem(settings.host, settings.port)
    if problem:
        return _fail(problem)
    problem = _device_problem(settings.device, args.device is not None)
    if problem:
        return _fail(f"cannot start: {problem}")

    # fail before uvicorn starts: one line naming the file, non-zero exit
    try:
        device = pick_device(settings.device, strict=True)
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


def _model_divisor(model: dict) -> str:
    """The model's own divisor in words: "√32 = 5.657", or "12 (sqrt(query_pre_attn_scalar))"."""
    divisor, rule = model["divisor"], model.get("divisor_rule", "")
    if rule == "sqrt(head_dim)":
        return f"√{model['head_dim']} = {divisor:.4g}"
    return f"{divisor:.4g} ({rule})" if rule else f"{divisor:.4g}"


def _what_ifs(data: dict) -> list[str]:
    """What the answer changed from the model as trained, in words; empty when nothing."""
    model, scale = data["model"], data["scale"]
    out = []
    if not data["causal"]:
        out.append("causal mask removed (each token also sees the ones after it)")
    if scale == "none":
        divided = "1"
    elif scale == "sqrt_dk":
        divided = f"√{model['head_dim']} = {math.sqrt(model['head_dim']):.4g}"
    elif scale == "model":
        divided = None
    else:
        divided = f"{float(scale):g}"
    if divided is not None and not math.isclose(data["divisor"], model["divisor"], rel_tol=1e-6):
        out.append(f"scores divided by {divided} instead of the model's {_model_divisor(model)}")
    return out


def _summary(data: dict, layer: int | None, head: int | None, width: int = 3) -> str:
    model = data["model"]
    tokens = data["tokens"]
    lines = [
        f"{model['checkpoint']}: {model['n_layer']} layers x {model['n_head']} heads, head_dim {model['head_dim']}, "
        f"context {model['block_size']} tokens, on {model['device']}",
    ]
    what_ifs = _what_ifs(data)
    if what_ifs:
        lines.append("what-if: " + "; ".join(what_ifs) + " (not the model as trained)")
    lines += [
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
        req = attention_request_model(settings.text_limit()).model_validate(request)
    except ValidationError as e:
        return _fail(_inspect_validation_message(e, args), EXIT_USAGE)
    problem = _device_problem(settings.device, bool(args.device))
    if problem:
        return _fail(problem)
    try:
        lm = load_model(settings.checkpoint_path, settings.device, settings.dtype)
    except CheckpointError as e:
        return _fail(str(e))
    svc = build_service(lm, with_heads=False)
    try:
        body, _ = attention_json(svc, req)
    except ApiError as e:
        return _fail(_flag_message(e.detail[0]["loc"][1:], e.detail[0]["msg"], args), EXIT_USAGE)
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

    ap = _Parser(
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
