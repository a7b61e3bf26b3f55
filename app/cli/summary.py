"""``attnscope inspect``'s text: an answer of ``POST /api/attention`` in words and numbers (the model, the
what-ifs, the tokens and the image or recording, the guesses after each token, the heads' statistics)."""

from __future__ import annotations

import math
from typing import Any


def _model_divisor(model: dict[str, Any]) -> str:
    """The model's own divisor in words: "√32 = 5.657", or "12 (sqrt(query_pre_attn_scalar))"."""
    divisor, rule = model["divisor"], model.get("divisor_rule", "")
    if rule == "sqrt(head_dim)":
        return f"√{model['head_dim']} = {divisor:.4g}"
    return f"{divisor:.4g} ({rule})" if rule else f"{divisor:.4g}"


def _what_ifs(data: dict[str, Any]) -> list[str]:
    """What the answer changed from the model as trained, in words; empty when nothing."""
    model, scale = data["model"], data["scale"]
    out = []
    if not data["causal"] and model.get("architecture") != "encoder":  # an encoder's mask is its own
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


def _image_line(data: dict[str, Any]) -> list[str]:
    """With an image: its size and how its tokens came out; with audio: its length and the words' times."""
    if "audio" in data:
        audio, words = data["audio"], data.get("words") or []
        said = " ".join(f"{w['word'].strip()} {w['start']:.2f}-{w['end']:.2f}s" for w in words)
        return [f"audio {audio['duration']:.2f} s, {audio['frames']} frames of {audio['seconds_per_frame']:g} s; "
                f"words: {said or '(none)'}"]
    if "image" not in data:
        return []
    kinds = data["token_kinds"]
    return [
        f"image {data['image']['width']}x{data['image']['height']}: {kinds.count('image')} image tokens, "
        f"{kinds.count('marker')} markers, {kinds.count('text')} text tokens"
    ]


def summary(data: dict[str, Any], layer: int | None, head: int | None, width: int = 3) -> str:
    """An answer (with ``stats``, ``predictions``, ``model`` and ``timing_ms``) as text: the model,
    the what-ifs, the tokens, the top ``width`` guesses after each, a table of statistics per head."""
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
        *_image_line(data),
        "",
        f"masked-LM guesses (top {width} at each position):"
        if model.get("architecture") == "encoder"
        else f"next-token guesses (top {width} after each position):",
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
