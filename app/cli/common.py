"""What the commands share: how one stops (one line on stderr, an exit status), the options that
pick the model, and the settings a command runs with (its options over the ``ATTNSCOPE_*``
variables), checked before anything loads.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from pydantic import ValidationError

from ..errors import one_line

if TYPE_CHECKING:
    from ..settings import Settings

EXIT_USAGE = 2
EXIT_FAILED = 1


class Failure(Exception):
    """A command stops here: ``main`` prints the message as one line and exits with ``code``."""

    def __init__(self, message: str, code: int = EXIT_FAILED):
        super().__init__(message)
        self.code = code


def fail(message: object, code: int = EXIT_FAILED) -> int:
    """Print ``attnscope: MESSAGE`` as one line on stderr; return the exit status ``code``."""
    print(f"attnscope: {one_line(message)}", file=sys.stderr)
    return code


class UsageError(ValueError):
    """Options that contradict each other (exit status 2)."""


def whole_number(least: int):
    """An argparse ``type``: a whole number of at least ``least``, else argparse's one-line error."""

    def parse(value: str) -> int:
        try:
            n = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
        if n < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, got {n}" if least else
                                             f"must be 0 or more, got {n}")
        return n

    return parse


def corpus_job(args: argparse.Namespace):
    """What ``atlas`` and ``jlens`` check before a model loads, in this order: ``--address`` only with
    Ray, every corpus file (one line naming a bad one), the model options and the device. Returns the
    checked corpus and the settings."""
    from ...model.atlas.corpus import CorpusError, open_corpus

    if args.address and args.engine != "ray":
        raise Failure("--address is for --engine ray", EXIT_USAGE)
    try:
        corpus = open_corpus(args.corpus)
    except CorpusError as e:
        raise Failure(str(e)) from None
    settings = command_settings(args, ("checkpoint", "device", "dtype", *PLACEMENT), blank_is_unset=True)
    check_device(settings.device, bool(args.device))
    return corpus, settings


def model_checkpoint(args: argparse.Namespace) -> str | None:
    """The model the options name, used as ``--checkpoint``: ``--ollama NAME[:TAG]`` -> the path of its model
    blob, ``--model ORG/NAME[@REVISION]`` -> its folder in the Hugging Face cache (downloaded there if need be);
    else ``args.checkpoint``. :class:`~model.ours.checkpoint.CheckpointError` for an Ollama model not pulled,
    :class:`UsageError` where two options name a model."""
    checkpoint = args.checkpoint
    if ollama := getattr(args, "ollama", None):
        if checkpoint:
            raise UsageError("--checkpoint and --ollama both name a model; give one")
        from ...model.sources.ollama import resolve_ollama

        checkpoint = str(resolve_ollama(ollama))
    if hub := getattr(args, "model", None):
        if checkpoint:
            raise UsageError("--model and --checkpoint (or --ollama) both name a model; give one")
        from ...model.sources.hub import resolve_hub

        checkpoint = str(resolve_hub(hub))
    return checkpoint


def add_ollama_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ollama",
        metavar="NAME[:TAG]",
        help="a model pulled with Ollama (found in $OLLAMA_MODELS or ~/.ollama/models; no network)",
    )


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """``--checkpoint``, ``--ollama``, ``--device`` and ``--dtype``: which model, where, in what precision."""
    parser.add_argument("--checkpoint", help="checkpoint directory or .gguf file (default: the shipped model)")
    parser.add_argument(
        "--model",
        metavar="ORG/NAME[@REVISION]",
        help="a model by its Hugging Face name: from the local Hub cache, else downloaded (HF_HUB_OFFLINE honoured)",
    )
    add_ollama_option(parser)
    parser.add_argument("--device", help="cpu, cuda, cuda:N or auto")
    parser.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), help="default fp32; bf16/fp16 on a GPU")
    parser.add_argument(
        "--device-map",
        metavar="auto|balanced|JSON",
        help='spread the layers (accelerate): auto, balanced, or JSON {"model.layers.0": 0 | "cpu" | "disk", ...}',
    )
    parser.add_argument("--max-memory", metavar="0=20GiB,cpu=60GiB", help="with --device-map: the most per device")
    parser.add_argument("--offload-folder", metavar="DIR", help='with --device-map: where layers put on "disk" go')


PLACEMENT = ("device_map", "max_memory", "offload_folder")  # the settings of add_model_options' placement options


def validation_message(err: ValidationError, given: dict | None = None) -> str:
    """Pydantic's errors in one line: ``"--port 70000: Input should be ...; ATTNSCOPE_DEVICE: ..."``,
    each naming the option it came from (``given``: option name -> value), else the variable."""
    from ..errors import clean_validation_errors

    given = given or {}
    parts = []
    for item in clean_validation_errors(err.errors()):
        loc = [str(p) for p in item["loc"] if p != "body"]
        name = loc[0] if loc else ""
        if name in given:
            where = f"--{name.replace('_', '-')} {given[name]}"
        elif name:
            where = f"ATTNSCOPE_{name.upper()}"
        else:
            where = ""
        parts.append(f"{where}: {item['msg']}" if where else item["msg"])
    return "; ".join(parts)


def command_settings(
    args: argparse.Namespace, names: Sequence[str], *, refused: str = "", blank_is_unset: bool = False
) -> Settings:
    """The settings a command runs with. ``--ollama NAME`` first becomes ``args.checkpoint`` (the
    model blob Ollama pulled); then each option in ``names`` that was given replaces its
    ``ATTNSCOPE_*`` variable. An option left out is None (with ``blank_is_unset``, an empty string
    counts as left out too).

    Raises :class:`Failure`: status 2 for ``--ollama`` with ``--checkpoint`` or an invalid value,
    status 1 for a model Ollama has not pulled (the message after ``refused``).
    """
    from ...model.ours.checkpoint import CheckpointError
    from ..settings import Settings

    try:
        args.checkpoint = model_checkpoint(args)
    except UsageError as e:
        raise Failure(str(e), EXIT_USAGE) from None
    except CheckpointError as e:
        raise Failure(f"{refused}{e}") from None
    options = {name: getattr(args, name) for name in names}
    given = {name: v for name, v in options.items() if (v if blank_is_unset else v is not None)}
    try:
        return Settings(**given)
    except ValidationError as e:
        raise Failure(validation_message(e, given), EXIT_USAGE) from None


def check_checkpoint(settings: Settings, given: bool, refused: str = "") -> None:
    """Raise :class:`Failure` when the checkpoint named is not there at all (before anything reads it).
    ``given``: it came from ``--checkpoint`` (else from ``ATTNSCOPE_CHECKPOINT``), as the line says."""
    path = settings.checkpoint
    if path is not None and not path.exists():
        source = "--checkpoint" if given else "ATTNSCOPE_CHECKPOINT"
        raise Failure(f"{refused}{source} {path}: no such file or folder")


def check_device(device: str | None, given: bool, refused: str = "") -> None:
    """Raise :class:`Failure` when the device asked for cannot be used here. Asked for by name,
    a missing GPU is an error on the command line; ``auto`` still means the CPU when there is
    none. ``given``: it came from ``--device`` (else from ``ATTNSCOPE_DEVICE``), as the line says."""
    from ...model.ours.checkpoint import CheckpointError, pick_device

    try:
        pick_device(device, strict=True)
    except CheckpointError as e:
        source = "--device" if given else "ATTNSCOPE_DEVICE"
        hint = "; use --device cpu, or --device auto for a GPU when there is one" if "CUDA" in str(e) else ""
        raise Failure(f"{refused}{source} {device}: {e}{hint}") from None


@contextlib.contextmanager
def quiet_libraries() -> Iterator[None]:
    """What the libraries say while a model loads, left out of a command's output: transformers'
    progress bars ("Loading weights") and its warnings (only errors pass), and the warnings about
    torchvision (the video processors some image-text models name) that reach Python's warnings.
    All as it was again on the way out (``main`` may run in a test's process)."""
    import warnings

    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # our own GPT needs no transformers
        hf_logging = None
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=r"torchvision(\.|$)")
        warnings.filterwarnings("ignore", message=r"(?is).*torchvision")
        if hf_logging is None:
            yield
            return
        verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        try:
            yield
        finally:
            hf_logging.set_verbosity(verbosity)
            if bars:
                hf_logging.enable_progress_bar()
