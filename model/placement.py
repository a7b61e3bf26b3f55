"""A parameter as the model computes with it, wherever accelerate placed it.

With a device map (``--device-map``, :class:`model.registry.Placement`) a layer put on the CPU or
disk may hold its parameters on the ``meta`` device: accelerate's hook (``_hf_hook``) brings them
in for the forward pass from its ``weights_map``. What reads weights outside a forward pass (the
decompositions of :mod:`model.causal`) reads them through :func:`resident`.
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
