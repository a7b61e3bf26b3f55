"""``POST /api/model``: switch the served model to another one on this machine, one at a time.

The name must be one ``GET /api/models`` lists (so a client can only open what the machine
already holds, never a path: :mod:`.models`), and fit in memory beside the current model:
the current one keeps answering until the new one is loaded, then every new request goes to the
new one (requests already running finish on the old). The load runs in a thread; its progress is
``AppState.switch`` (``{"name", "status": "loading" | "failed", "error"}``), which ``GET
/api/models`` reports.

Asking for the served model while another loads cancels that switch (:func:`keep_serving`): the
other model, once loaded, is dropped, never served. Until its load ends no other switch starts
(409), so two models never load at once beside the served one.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import torch

from ..errors import ApiError
from .models import ACCEPTED

log = logging.getLogger("attnscope")


def find_local(name: str, models: list[dict], field: str = "name") -> dict:
    """The entry of ``GET /api/models`` named ``name``, openable; a 422 naming ``field`` otherwise."""
    entry = next((m for m in models if m["name"] == name), None)
    if entry is None:
        names = ", ".join(m["name"] for m in models if m["status"] == "ok") or "none"
        why = f"{field} is {name!r}: not a model this server opens; {field} is {ACCEPTED} (now: {names})"
        raise ApiError(422, why, loc=("body", field), type_="not_a_listed_model")
    if entry["status"] != "ok":
        raise ApiError(422, f"{field} is {name!r}: it cannot be opened: {entry['status']}", loc=("body", field))
    return entry


def available_bytes(device: torch.device) -> int | None:
    """Memory free for another model: the GPU's free memory, or MemAvailable on Linux; None if unknown."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def free_bytes(settings) -> tuple[str, int | None]:
    """Where a new model's weights would go and the memory free there: the device's; with a device
    map, each device's the map may use, summed (each capped by ``--max-memory``), and no limit
    when layers may go to disk (``--offload-folder``). None if unknown."""
    from ...model.ours.checkpoint import pick_device

    if settings.device_map is None:
        device = pick_device(settings.device)
        return str(device), available_bytes(device)
    if settings.offload_folder is not None:
        return "the devices of --device-map and disk", None
    placement = settings.placement()
    caps = placement.max_memory or {}
    devices = [torch.device("cuda", i) for i in range(torch.cuda.device_count())] + [torch.device("cpu")]
    total = 0
    for device in devices:
        free = available_bytes(device)
        if free is None:
            return "the devices of --device-map", None
        cap = caps.get(device.index if device.type == "cuda" else "cpu")
        total += min(free, cap) if isinstance(cap, int) else free
    return " + ".join(str(d) for d in devices), total


def check_memory(entry: dict, dtype: str, device: torch.device | str, free: int | None, field: str = "name") -> None:
    """The new model's weights must fit beside the current one: about 2× its files in fp32 (their
    weights are often 16-bit on disk), 1× in half precision; a 507 naming both sizes otherwise."""
    size = entry.get("size_bytes") or 0
    need = size * (2 if dtype == "fp32" else 1)
    if free is not None and need > free:
        raise ApiError(
            507,
            f"{field} is {entry['name']!r}: it needs about {need / 2**30:.1f} GiB on {device} in {dtype} and "
            f"{free / 2**30:.1f} GiB is free beside the current model, which stays",
            loc=("body", field),
            type_="not_enough_memory",
            ctx={"need_bytes": need, "free_bytes": free},
        )


def keep_serving(state, name: str) -> dict | None:
    """``name`` is the served model: cancel a pending switch, and say so; None if ``name`` is not served."""
    with state.switch_lock:  # a load installs its model under this lock: what is served cannot change here
        if state.service is None or state.service.info["name"] != name:
            return None
        job = state.switch_job
        cancelled = None
        if job is not None and not job["cancelled"] and job["kind"] == "switch":
            job["cancelled"] = True
            cancelled = job["name"]
            state.switch = None
            log.info("attnscope: switch to %s cancelled: %s asked for, and served", cancelled, name)
    return {"name": name, "status": "serving", "cancelled": cancelled}


def start_switch(state, entry: dict, load, kind: str = "switch", field: str = "name") -> None:
    """Load ``entry`` in a thread with ``load(path)`` -> Service; then serve it, unless cancelled
    meanwhile (:func:`keep_serving`). 409 (naming ``field``) while another loads, cancelled or not.
    ``kind`` "second": the model is loaded beside the served one, as ``state.second_service``
    (``POST /api/compare-models``), its progress in ``state.second`` instead of ``state.switch``."""
    with state.switch_lock:
        if state.switch_job is not None:
            running = state.switch_job["name"]
            why = "its switch was cancelled, and its load is finishing" if state.switch_job["cancelled"] else "loading"
            raise ApiError(409, f"{running} is {why}; one model at a time", loc=("body", field))
        job = {"name": entry["name"], "cancelled": False, "kind": kind}
        state.switch_job = job
        setattr(state, kind, {"name": entry["name"], "status": "loading", "error": None})

    def run() -> None:
        try:
            svc = load(Path(entry["path"]))
        except Exception as e:  # any failure is said, and the current model stays
            with state.switch_lock:
                state.switch_job = None
                if not job["cancelled"]:
                    error = " ".join(str(e).split())[:400]
                    setattr(state, kind, {"name": entry["name"], "status": "failed", "error": error})
            log.warning("attnscope: could not switch to %s: %s", entry["name"], " ".join(str(e).split())[:400])
            return
        with state.switch_lock:
            state.switch_job = None
            if job["cancelled"]:
                log.info("attnscope: %s loaded after its switch was cancelled: dropped", entry["name"])
                return
            if kind == "second":
                state.second_service = svc
            else:
                state.service = svc  # every new request gets the new model; running ones finish on the old
            setattr(state, kind, None)
        log.info("attnscope: now %s %s", "serving" if kind == "switch" else "holding beside it", entry["name"])

    threading.Thread(target=run, name="attnscope-switch", daemon=True).start()
