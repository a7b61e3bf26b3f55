"""A request's ``audio``: checked, decoded (:func:`~attnscope.model.speech.audio.decode_audio`: libsndfile,
then soxr to the model's rate) and heard through the model's feature extractor, or a 422 naming ``audio``
(413 over the byte limit) before any computing."""

from __future__ import annotations

from ..model.speech.audio import AudioError, Recording, decode_audio
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
