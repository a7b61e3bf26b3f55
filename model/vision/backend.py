"""Image-text-to-text models (transformers ``AutoModelForImageTextToText`` and ``AutoProcessor``)
as a backend: the language model recorded exactly as a text model's, the vision tower run as the
model runs it (its own attention is not recorded), and the prompt laid out by the processor.

:func:`load_vision_dir` opens a folder whose config has a ``vision_config``; a layout attnscope
cannot trace exactly is refused in one line (:data:`LAYOUTS` lists those it can).
:meth:`VisionBackend.prepare` lays out a text and an image as the model's processor and chat
template do (the image, then the text) and tells each token's kind and each image token's box.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..backends import DTYPES, parameter_count
from ..families.attention import IMPLEMENTATION, recording, register
from ..families.backend import TransformersBackend
from ..families.config import bos_token, preflight
from ..options import AttentionOptions
from ..ours.checkpoint import CheckpointError
from ..ours.tokenizer import BPETokenizer
from ..precision import exact_fp32
from .bound import ImageBound
from .gemma3 import Gemma3Layout
from .idefics3 import Idefics3Layout
from .layout import Box, LayoutError
from .pixtral import PixtralLayout, llava_layout
from .qwen import MODEL_TYPES as QWEN
from .qwen import QwenLayout, QwenProcessor

LAYOUTS = {
    "llava": llava_layout,  # LLaVA's own layout, or Pixtral's with a pixtral tower
    "gemma3": Gemma3Layout,
    "idefics3": Idefics3Layout,
    "smolvlm": Idefics3Layout,
    "mistral3": PixtralLayout,
    **dict.fromkeys(QWEN, QwenLayout),
}


@dataclass
class VisionPrompt:
    """A text and an image as the model receives them."""

    ids: list[int]
    kinds: list[str]  # per token: "text", "image" or "marker"
    boxes: list[Box]  # per image token, in token order: [x0, y0, x1, y1] in the uploaded image's pixels
    width: int
    height: int
    inputs: dict[str, torch.Tensor] = field(default_factory=dict)  # pixel_values and what else the model reads


class VisionBackend(TransformersBackend):
    """A :class:`TransformersBackend` whose passes can carry one image."""

    def __init__(self, model, tokenizer, device, name: str, processor, layout) -> None:
        super().__init__(model, tokenizer, device, name)
        self.processor = processor
        self.layout = layout
        self.facts.vision = True

    def prepare(self, text: str, image) -> VisionPrompt:
        """``text`` and a PIL ``image`` laid out by the processor (its chat template when it has one,
        a user turn holding the image then the text, with the generation prompt after it)."""
        proc = self.processor
        if getattr(proc, "chat_template", None):
            turn = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
            prompt = proc.apply_chat_template(turn, add_generation_prompt=True, tokenize=False)
        else:
            prompt = f"{self.layout.placeholder(proc)}{text}"
        try:
            enc = proc(text=prompt, images=[image], return_tensors="pt")
        except ValueError as e:  # an image the processor refuses (Qwen: an aspect ratio over 200)
            raise LayoutError(" ".join(str(e).split())[:300]) from e
        ids = enc["input_ids"][0].tolist()
        laid = self.layout.lay_out(ids, *image.size)
        inputs = {k: enc[k].to(self.device) for k in self.layout.model_inputs if k in enc}
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(self.model.dtype)
        return VisionPrompt(ids, laid.kinds, laid.boxes, image.size[0], image.size[1], inputs)

    def with_image(self, prompt: VisionPrompt) -> ImageBound:
        """This backend with ``prompt``'s image in every pass (for model code that passes ids alone)."""
        return ImageBound(self, prompt)

    @torch.inference_mode()
    @exact_fp32()
    def image_features(self, prompt: VisionPrompt):
        """``prompt``'s image through the vision tower and projector, as the model's ``get_image_features``
        gives it (``pooler_output``, and Qwen3-VL's ``deepstack_features``): what a pass may take as
        ``mm_encoder_outputs={"image": ...}`` in place of the pixels. The tower's attention is not recorded."""
        takes = inspect.signature(self.trunk.get_image_features).parameters
        vision = {k: v for k, v in prompt.inputs.items() if k in takes}
        return self.trunk.get_image_features(**vision, return_dict=True)

    def _forward(self, ids: list[int], prompt: VisionPrompt | None, logits: bool) -> torch.Tensor:
        idx = torch.tensor([ids], dtype=torch.long, device=self.device)  # (1, T)
        extra = prompt.inputs if prompt is not None else {}
        if logits:
            return self.model(input_ids=idx, use_cache=False, **extra).logits[0]  # (T, V)
        return self.trunk(input_ids=idx, use_cache=False, **extra).last_hidden_state[0]  # (T, C)

    @torch.inference_mode()
    @exact_fp32()
    def run(self, ids, opts: AttentionOptions, sink, logits: bool = True, image: VisionPrompt | None = None):
        """As :meth:`TransformersBackend.run`, with the image of ``image`` (a :meth:`prepare`) in the pass."""
        with recording(sink, opts):
            out = self._forward(ids, image, logits)
        return out if logits else None

    @torch.inference_mode()
    @exact_fp32()
    def hidden(self, ids, opts: AttentionOptions, sink, image: VisionPrompt | None = None) -> torch.Tensor:
        """As :meth:`TransformersBackend.hidden`, with the image of ``image`` in the pass."""
        with recording(sink, opts):
            return self._forward(ids, image, False)


def _processor(path: Path, layout_of):
    """The folder's processor; for Qwen, whose processor needs torchvision (for videos), its image path
    from the image processor and tokenizer where torchvision is missing."""
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(path, local_files_only=True)
    except ImportError:
        if layout_of is not QwenLayout:
            raise
        return QwenProcessor.from_pretrained(path)


def load_vision_dir(path: Path, device: torch.device, dtype: str = "fp32") -> VisionBackend:
    """Open a local image-text-to-text model folder offline; :class:`CheckpointError` for a layout
    attnscope cannot trace exactly, or anything else it cannot show."""
    cfg = preflight(path)
    layout_of = LAYOUTS.get(cfg.model_type)
    if layout_of is None:
        raise CheckpointError(
            f"{path.name} is a {cfg.model_type} image-text model; attnscope maps image tokens to the image exactly "
            f"only for {', '.join(LAYOUTS)} (open it as a text model by removing its vision_config, or pick another)"
        )
    try:
        from PIL import Image  # noqa: F401
        from transformers import AutoModelForImageTextToText
    except ImportError as e:
        raise CheckpointError(f"{path} is an image-text model; install Pillow to open it (pip install pillow)") from e
    register()
    try:
        processor = _processor(path, layout_of)
        layout = layout_of(cfg, processor)
        impl = {"": IMPLEMENTATION, "text_config": IMPLEMENTATION, "vision_config": "sdpa"}
        model = AutoModelForImageTextToText.from_pretrained(
            path, local_files_only=True, attn_implementation=impl, dtype=DTYPES[dtype]
        )
    except LayoutError as e:
        raise CheckpointError(f"{path.name}: {e}") from e
    except (ValueError, OSError, ImportError) as e:
        raise CheckpointError(f"cannot open {path} as an image-text model: {' '.join(str(e).split())[:300]}") from e
    try:
        model.to(device)
    except torch.OutOfMemoryError as e:
        gib = parameter_count(model) * model.dtype.itemsize / 2**30
        raise CheckpointError(f"the model ({gib:.1f} GiB in {dtype}) does not fit on {device}; try --dtype bf16") from e
    tokenizer = BPETokenizer.load(path / "tokenizer.json", bos_token=bos_token(path, cfg))
    return VisionBackend(model, tokenizer, device, path.name, processor, layout)
