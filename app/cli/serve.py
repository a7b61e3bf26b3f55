"""``attnscope serve``: check everything that would stop the server (the options, the checkpoint,
the device, the port), each as one line before any weights load, then run uvicorn on the app.

    attnscope serve [--host 127.0.0.1] [--port 8000] [--checkpoint DIR] [--device cpu] [--workers 1] [--compile]
                    [--models-dir DIR]    (its folders and .gguf files: GET /api/models, opened by name)
    attnscope serve --checkpoint FILE.gguf | --ollama NAME[:TAG]    (a GGUF model, dequantized)
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import shutil
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from .common import EXIT_USAGE, PLACEMENT, Failure, add_model_options, check_checkpoint, check_device, command_settings

if TYPE_CHECKING:
    from ..settings import Settings

REFUSED = "cannot start: "


def add_serve_command(sub) -> None:
    serve = sub.add_parser("serve", help="run the web app and JSON API")
    serve.add_argument("--host", help="address to bind (default 127.0.0.1; 0.0.0.0 to listen on every interface)")
    serve.add_argument("--port", type=int, help="default 8000")
    add_model_options(serve)
    serve.add_argument("--workers", type=int, default=1, help="worker processes (each loads the model)")
    serve.add_argument(
        "--compile",
        action="store_true",
        default=None,
        help="compile the statistics' block passes (torch.compile): fewer kernel launches on a GPU",
    )
    serve.add_argument(
        "--models-dir",
        metavar="DIR",
        help="a folder of models (transformers folders, .gguf files) that the page may open or compare by name",
    )
    serve.add_argument(
        "--atlas",
        action="append",
        metavar="DIR",
        help="a head atlas (attnscope atlas --out DIR) for the Atlas view; twice to compare two",
    )
    serve.add_argument(
        "--jlens",
        metavar="FILE | ORG/NAME:FILE",
        help="a Jacobian lens (attnscope jlens --out FILE), or one in the local Hugging Face cache: "
        "POST /api/lens with lens: jacobian",
    )
    serve.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    """Check, in this order, the options, that the checkpoint is there, the device, the port and
    the model itself; then serve."""
    names = ("host", "port", "checkpoint", "device", "dtype", "atlas", "compile", "jlens", "models_dir", *PLACEMENT)
    settings = command_settings(args, names, refused=REFUSED)
    if args.workers < 1:
        raise Failure("--workers must be at least 1", EXIT_USAGE)
    # what was typed first (a missing checkpoint is that, whatever the port); then the port, in one
    # line, before the model is loaded
    check_checkpoint(settings, args.checkpoint is not None, refused=REFUSED)
    check_device(settings.device, args.device is not None, refused=REFUSED)
    if settings.models_dir is not None and not settings.models_dir.is_dir():
        source = "--models-dir" if args.models_dir is not None else "ATTNSCOPE_MODELS_DIR"
        raise Failure(f"{REFUSED}{source} {settings.models_dir}: not a folder")
    problem = port_problem(settings.host, settings.port)
    if problem:
        raise Failure(problem)
    preflight(settings)
    run(settings, args.workers)
    return 0


def port_problem(host: str, port: int) -> str | None:
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


def preflight(settings: Settings) -> None:
    """Raise :class:`Failure` (one line naming the file) if the model cannot be served, before
    uvicorn starts. Our own GPT loads in milliseconds: it is loaded once. A GGUF file has its
    header, architecture, tensor types, packages and memory checked, no weights read; a
    transformers model has the checks that need no weights (the server opens it once)."""
    from ...model.ours.checkpoint import CheckpointError, pick_device, read_config
    from ...model.registry import family_of, load_model
    from ...model.sources.gguf_file import find_gguf
    from ...model.sources.gguf_file import preflight as gguf_preflight

    try:
        device = pick_device(settings.device, strict=True)
        if settings.dtype != "fp32" and device.type == "cpu":
            raise CheckpointError(f"--dtype {settings.dtype} needs a GPU; on the CPU attnscope runs fp32")
        gguf = find_gguf(settings.checkpoint_path)
        if gguf is not None:
            gguf_preflight(gguf, device, settings.dtype)
        elif family_of(read_config(settings.checkpoint_path)) == "attnscope":
            load_model(settings.checkpoint_path, "cpu")
        else:
            from ...model.families.config import preflight as hf_preflight

            hf_preflight(Path(settings.checkpoint_path), seq2seq=True)  # encoder-decoders are served too
    except CheckpointError as e:
        raise Failure(f"{REFUSED}{e}") from None
    if settings.compile and not c_compiler():
        raise Failure(
            f"{REFUSED}--compile needs a C/C++ compiler (torch.compile builds its kernels with one, Triton's "
            "launcher too): none found (CC, cc, gcc, clang); install one or serve without --compile"
        )
    from ...model.jlens.lensfile import LensFileError, load_lens, resolve_lens
    from ..compute.atlas import AtlasFolderError, load_atlases

    try:
        load_atlases(settings.atlas)
        if settings.jlens:  # read here for its one line; whether it fits the model, once the server loads both
            load_lens(resolve_lens(settings.jlens))
    except (AtlasFolderError, LensFileError) as e:
        raise Failure(f"{REFUSED}{e}") from None


def c_compiler() -> str | None:
    """The C compiler torch.compile would find: ``$CC``, else ``cc``, ``gcc`` or ``clang`` on the PATH."""
    names = [os.environ["CC"]] if os.environ.get("CC") else ["cc", "gcc", "clang"]
    return next((found for name in names if (found := shutil.which(name))), None)


def run(settings: Settings, workers: int) -> None:
    """Print the address to open, then serve until Ctrl+C: the app in this process, or
    ``workers`` processes that each build their own app from the environment."""
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(levelname)s:     %(message)s")
    shown_host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    if ":" in shown_host:
        shown_host = f"[{shown_host}]"
    print(f"attnscope: open http://{shown_host}:{settings.port}/ in a browser (Ctrl+C stops the server)", flush=True)
    common = {"host": settings.host, "port": settings.port, "server_header": False, "log_level": "info"}
    if workers > 1:
        env = {"checkpoint": str(settings.checkpoint_path), "device": settings.device, "dtype": settings.dtype}
        env |= {"device_map": settings.device_map, "max_memory": settings.max_memory}
        env["offload_folder"] = str(settings.offload_folder) if settings.offload_folder else None
        env["compile"] = "1" if settings.compile else None
        env["jlens"] = settings.jlens
        env["models_dir"] = str(settings.models_dir) if settings.models_dir else None
        if settings.atlas:  # the workers read them too
            env["atlas"] = ",".join(str(p) for p in settings.atlas)
        for key, value in env.items():
            if value is not None:
                os.environ[f"ATTNSCOPE_{key.upper()}"] = value
        uvicorn.run("attnscope.app.main:create_app_from_env", factory=True, workers=workers, **common)
    else:
        from ..main import create_app

        uvicorn.run(create_app(settings), **common)
