"""A request's ``audio``: checked, decoded (:func:`~attnscope.model.speech.audio.decode_audio`: libsndfile,
then soxr to the model's rate) and heard through the model's feature extractor, or a 422 naming ``audio``
(413 over the byte limit) before any computing."""

from __future__ import annotations

from ..model.options import AttentionOptions
from ..model.speech.audio import AudioError, Recording, decode_audio
from .compute.checks import ablate_set
from .errors import ApiError
from .images import upload_bytes
from .service import Service

LOC = ("body", "audio")


def recording_of(svc: Service, value: str) -> Recording:
    """The request's ``audio`` (base64 or a ``data:`` URL) as mono samples at the model's rate."""
    facts = svc.loaded.facts
    if not svc.info["audio"]:
        msg = f"audio was sent, but {facts.name} ({facts.family}) does not hear; open a speech model (Whisper)"
        raise ApiError(422, msg, loc=LOC, type_="audio_unsupported")
    limits = svc.info["audio_limits"]
    data = upload_bytes(value, limits["max_bytes"], "audio")
    try:
        return decode_audio(data, svc.loaded.backend.ear.sample_rate, limits["max_seconds"])
    except AudioError as e:
        ctx = {"limit": e.limit} if e.limit else None
        raise ApiError(422, str(e), loc=LOC, type_=f"audio_{e.kind}", ctx=ctx) from None


def no_audio(svc: Service) -> None:
    """A 422 naming ``audio`` where a speech model is asked without its recording."""
    if svc.info["audio"]:
        msg = f"{svc.loaded.facts.name} hears audio: send `audio` (WAV, FLAC, OGG/Vorbis or MP3, base64)"
        raise ApiError(422, msg, loc=LOC, type_="audio_missing")


def with_timing(svc: Service, prompt, req) -> None:
    """Add ``token_timestamps`` and ``words`` (asked, ``alignment_mean``) to a heard subject's answer: from the
    cross stack of its bound target, with the request's switched-off heads where the stack looked at is
    ``cross`` (does the timing survive without a head?), else the model as trained."""
    bound = prompt.backend  # a TargetBound over the backend hearing the recording
    ablate = getattr(req, "ablate", None) if prompt.stack == "cross" else None
    opts = AttentionOptions(ablate=ablate_set(ablate, svc.loaded.facts)) if ablate else None
    times, words, mean = bound.timing(bound.target, opts, bool(getattr(req, "alignment_mean", False)))
    prompt.adds |= {"token_timestamps": times, "words": words}
    if mean is not None:
        prompt.adds["alignment_mean"] = mean
