"""Where accelerate placed a model's parts, and a parameter as the model computes with it there.

With a device map (``--device-map``, :class:`model.registry.Placement`) a layer put on the CPU or
disk may hold its parameters on the ``meta`` device: accelerate's hook (``_hf_hook``) brings them
in for the forward pass from its ``weights_map``. What reads weights outside a forward pass (the
decompositions of :mod:`model.causal`) reads them through :func:`resident`. :func:`input_device`
and :func:`layer_devices` say where the inputs go and where each layer sits (``/api/model`` ``devices``).
"""

from __future__ import annotations

import torch


def resident(module: torch.nn.Module, name: str) -> torch.Tensor | None:
    """``module``'s parameter (or buffer) ``name``, detached, on the device its forward pass uses
    it on; None where the module has none."""
    value = getattr(module, name, None)
    if value is None or value.device.type != "meta":
        return None if value is None else value.detach()
    hook = getattr(module, "_hf_hook", None)
    weights = getattr(hook, "weights_map", None)
    if weights is None:
        raise RuntimeError(f"{type(module).__name__}.{name} is on the meta device and no offload hook holds it")
    return weights[name].detach().to(hook.execution_device)


def device_name(where) -> str:
    """A device map's value as the API names it: a GPU number -> ``"cuda:N"``; ``"cpu"``, ``"disk"`` as they are."""
    return f"cuda:{where}" if isinstance(where, int) else str(where)


def input_device(device_map: dict) -> torch.device:
    """Where inputs go under accelerate's placement: the first GPU of the map (where offloaded layers
    run too), else the CPU."""
    gpus = [device_name(w) for w in device_map.values() if device_name(w) not in ("cpu", "disk", "meta")]
    return torch.device(gpus[0]) if gpus else torch.device("cpu")


def layer_devices(model: torch.nn.Module, n_layer: int) -> dict[str, str]:
    """Per decoder layer, by its number as a string: where the device map put it (the longest entry
    of ``hf_device_map`` naming the layer's module or a module holding it)."""
    import re

    device_map = model.hf_device_map
    out: dict[str, str] = {}
    for name, _ in model.named_modules():
        found = re.search(r"(?:^|\.)(?:layers|h|blocks)\.(\d+)$", name)
        if not found or int(found.group(1)) >= n_layer:
            continue
        holders = [k for k in device_map if k == "" or name == k or name.startswith(k + ".")]
        if holders:
            out.setdefault(found.group(1), device_name(device_map[max(holders, key=len)]))
    return out
