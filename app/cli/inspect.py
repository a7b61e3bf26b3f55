"""``attnscope inspect``: run a text through the model and print what each head does, in words
and numbers, or (``--json``) the exact bytes ``POST /api/attention`` answers.

    attnscope inspect "The cat sat on the mat." [--json] [--layer L] [--head H] [--image FILE] [--checkpoint DIR]
    attnscope inspect --messages chat.json [--json] ...

The options become an API request, checked by the API's own model; an error names the option
as typed (``--head 9: the model has 4 heads``), not the request field. ``--image FILE`` (an
image-text model) goes in as the request's ``image``; a file that cannot be read or shown is one
line naming ``--image`` and exit status 1. ``--messages FILE`` (a chat model) sends a conversation from
a JSON file instead of the text, laid out by the model's chat template; a file that cannot be read, or a
conversation the model cannot take, is one line naming ``--messages`` and exit status 1. ``--audio FILE``
(a speech model: WAV, FLAC, OGG/Vorbis, MP3) is the request's ``audio``, in place of the text.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from .common import (
    EXIT_USAGE,
    PLACEMENT,
    Failure,
    add_model_options,
    check_checkpoint,
    check_device,
    command_settings,
    quiet_libraries,
)

if TYPE_CHECKING:
    from ..schemas.attention import AttentionRequest
    from ..settings import Settings

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
    "image": "--image",
    "audio": "--audio",
    "messages": "--messages",
}


class _Typed(argparse.Action):
    """Store the option's value converted by ``convert`` (a usage error when it cannot be), and the text
    as typed in ``args.typed``, so an error echoes ``--scale -3`` and not ``-3.0``."""

    def __init__(self, *args, convert=float, **kwargs):
        super().__init__(*args, **kwargs)
        self.convert = convert

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            value = self.convert(values)
        except argparse.ArgumentTypeError as e:
            raise argparse.ArgumentError(self, str(e)) from None
        except ValueError:
            raise argparse.ArgumentError(self, f"invalid number: {values!r}") from None
        setattr(namespace, self.dest, value)
        namespace.typed = {**(getattr(namespace, "typed", None) or {}), self.dest: values}


def _scale(value: str) -> str | float:
    """``--scale``: a rule's name, or a number to divide the scores by."""
    if value in ("model", "sqrt_dk", "none"):
        return value
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"scale must be 'model', 'sqrt_dk', 'none' or a number, got {value!r}"
        ) from None


def add_inspect_command(sub) -> None:
    ins = sub.add_parser("inspect", help="run a text through the model and summarise what each head does")
    ins.add_argument("text", nargs="?", help="the text to run through the model (quote it); or --messages FILE")
    ins.add_argument("--json", action="store_true", help="print the JSON of POST /api/attention instead")
    add_model_options(ins)
    ins.add_argument("--layer", type=int, help="only this layer")
    ins.add_argument("--head", type=int, help="only this head (in each layer shown)")
    ins.add_argument("--include", help="comma-separated fields (default pattern,stats)")
    ins.add_argument("--no-causal", action="store_true", help="what-if: remove the causal mask")
    ins.add_argument(
        "--scale",
        action=_Typed,
        convert=_scale,
        default="model",
        help="model (its own divisor, default), sqrt_dk, none or a number",
    )
    ins.add_argument("--top-k", type=int, default=5, help="next-token predictions per position (0..50, default 5)")
    ins.add_argument(
        "--temperature", action=_Typed, default=1.0, help="softmax temperature of those predictions (default 1.0)"
    )
    ins.add_argument("--image", metavar="FILE", help="an image-text model: this image (PNG, JPEG, WebP, GIF) first")
    ins.add_argument("--audio", metavar="FILE", help="a speech model (Whisper): this recording, not a text")
    ins.add_argument(
        "--messages",
        metavar="FILE",
        help='a chat model: a conversation instead of the text, a JSON file of [{"role", "content"}, ...] '
        '(or {"messages": [...]}), laid out by the model\'s chat template',
    )
    ins.set_defaults(func=cmd_inspect)


def cmd_inspect(args: argparse.Namespace) -> int:
    """Check the options (as a request) and the device, load the model, answer, print."""
    from ...model.ours.checkpoint import CheckpointError
    from ...model.registry import load_model
    from ..compute.attention import answer_arrays, attention_json
    from ..errors import ApiError
    from ..service import build_service
    from ..subject import subject_of
    from .summary import summary

    settings = command_settings(args, ("checkpoint", "device", "dtype", *PLACEMENT), blank_is_unset=True)
    req = _request(args, settings, audio="" if args.audio is not None else None)  # the file is read below
    check_device(settings.device, bool(args.device))
    check_checkpoint(settings, bool(args.checkpoint))
    if args.image is not None or args.audio is not None:
        part = "image" if args.image is not None else "audio"
        req = _request(args, settings, **{part: _upload_file(part, getattr(args, part), settings)})
    with quiet_libraries():  # no progress bar, no library warnings: the answer, or one line
        try:
            lm = load_model(settings.checkpoint_path, settings.device, settings.dtype, settings.placement())
        except CheckpointError as e:
            raise Failure(str(e)) from None
        svc = build_service(
            lm, with_heads=False, image_limits=settings.image_limits(), audio_bytes=settings.max_audio_bytes
        )
        try:
            if args.json:
                body, _ = attention_json(svc, req, subject_of(svc, req))
                sys.stdout.buffer.write(body + b"\n")
                sys.stdout.flush()
            else:
                started = time.perf_counter()
                answer = answer_arrays(svc, req, subject_of(svc, req))
                answer["timing_ms"] = (time.perf_counter() - started) * 1000
                print(summary(answer, args.layer, args.head, width=min(3, max(1, args.top_k))))
        except ApiError as e:  # what only the model can refuse: a layer or head it lacks, a text too long
            loc = e.detail[0]["loc"][1:]
            code = 1 if loc[:1] in (["image"], ["audio"], ["messages"]) else EXIT_USAGE  # the file: exit 1
            raise Failure(_flag_message(loc, e.detail[0]["msg"], args), code) from None
    return 0


def _upload_file(part: str, path: str, settings: Settings) -> str:
    """``--image FILE``'s (``--audio FILE``'s) bytes as base64, the request's ``image`` (``audio``), read
    before the model loads; one line naming the option if the model cannot take it (asked first, from
    its config) or the file cannot be read or is over the limit. An image is decoded here too (Pillow
    missing, a bad file: one line); a recording when the model has loaded (its window is the model's)."""
    image = part == "image"
    if not (settings.reads_images() if image else settings.reads_audio()):
        name = settings.checkpoint_path.name
        what = "reads text only; open an image-text model" if image else "does not hear; open a speech model"
        raise Failure(f"--{part} {path}: {name} {what} (--checkpoint, --model)")
    import base64

    from ...model.vision.images import ImageError, decode_image

    max_bytes = settings.max_image_bytes if image else settings.max_audio_bytes
    try:
        size = Path(path).stat().st_size
        if size > max_bytes:
            raise Failure(f"--{part} {path}: {size:,} bytes; the limit is {max_bytes:,} bytes")
        data = Path(path).read_bytes()
    except OSError as e:
        raise Failure(f"--{part} {path}: {e.strerror or e}") from None
    try:
        if image:
            decode_image(data, settings.max_image_pixels)
    except ImageError as e:
        raise Failure(f"--image {path}: {e}") from None
    return base64.b64encode(data).decode()


def _messages_file(path: str) -> Any:
    """``--messages FILE``'s conversation: a JSON list of messages, or an object holding one under ``messages``;
    one line naming the file when it cannot be read or is not JSON (its messages are checked as the server does)."""
    import json

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise Failure(f"--messages {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise Failure(f"--messages {path}: not JSON ({e})") from None
    return data.get("messages") if isinstance(data, dict) else data


def _request(
    args: argparse.Namespace, settings: Settings, image: str | None = None, audio: str | None = None
) -> AttentionRequest:
    """The options as a ``POST /api/attention`` request, checked as the server checks it (the
    summary needs ``stats``, so it is always asked for without ``--json``)."""
    from ..schemas.attention import DEFAULT_INCLUDE, AttentionRequest
    from ..schemas.subject import with_text_limit

    include = args.include.split(",") if args.include else list(DEFAULT_INCLUDE)
    if not args.json and "stats" not in include:
        include.append("stats")
    request = {
        "text": args.text,
        "messages": _messages_file(args.messages) if args.messages is not None else None,
        "layers": None if args.layer is None else [args.layer],
        "heads": None if args.head is None else [args.head],
        "include": include,
        "causal": not args.no_causal,
        "scale": args.scale,
        "top_k": args.top_k,
        "temperature": args.temperature,
        "image": image,
        "audio": audio,
    }
    try:
        return with_text_limit(AttentionRequest, settings.text_limit()).model_validate(request)
    except ValidationError as e:
        from ..errors import clean_validation_errors

        items = clean_validation_errors(e.errors())
        message = "; ".join(_flag_message([p for p in it["loc"] if p != "body"], it["msg"], args) for it in items)
        raise Failure(message, EXIT_USAGE) from None


def _flag_message(loc: Sequence, msg: str, args: argparse.Namespace) -> str:
    """``(["heads", 0], "heads[0] is 9; the model has 4 heads ...")`` -> ``"--head 9: the model has 4 heads ..."``."""
    field = str(loc[0]) if loc else ""
    flag = INSPECT_FLAGS.get(field)
    if flag is None:
        return f"{'.'.join(map(str, loc))}: {msg}" if loc else msg
    if field in ("image", "audio"):  # the API's message names the part already: "image is 100×60 = 6,000 pixels"
        return f"{flag} {getattr(args, field)}: {msg}"
    if field == "messages":
        where = ".".join(map(str, loc[1:]))
        return (
            f"--messages {args.messages}{' at ' + where if where else ''}: {msg}"
            if args.messages
            else ("give a text or --messages FILE" if "required" in msg else msg)
        )
    if field == "text":  # "text is 300 tokens; the model's context is 256 tokens": the count stays
        msg = re.sub(r"^text (is )?", "", msg)
    msg = re.sub(r"^\w+(\[\d+\])? is [^;]*; ", "", msg)  # the API's "heads[0] is 9; " says what the flag says
    msg = msg[:1].lower() + msg[1:]
    typed = getattr(args, "typed", None) or {}  # --scale and --temperature as typed, not as parsed
    value = {
        "layers": args.layer,
        "heads": args.head,
        "include": args.include,
        "scale": typed.get("scale", args.scale),
        "top_k": args.top_k,
        "temperature": typed.get("temperature", args.temperature),
        "image": args.image,
    }.get(field)
    return f"{flag} {value}: {msg}" if value is not None else f"{flag}: {msg}"
