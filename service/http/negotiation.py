"""What a request's headers say about its body and the answer it accepts (RFC 9110 8.3, 8.4, 12.5.1). Media types
are case-insensitive; ``q=0`` is "not acceptable". A POST body that is not uncompressed UTF-8 JSON gets 415, not a
confusing 422 later (a form, UTF-16)."""

from __future__ import annotations

from ..engine.errors import ServiceError
from ..wire import JSON_MEDIA_TYPE, RAGGED_MEDIA_TYPE, SAFETENSORS_MEDIA_TYPE
from .errors import HttpErrorKind

_JSON_SUFFIX = "+json"


def _media_ranges(accept: str) -> dict[str, float]:
    """``Accept`` as media range -> quality (the highest given for a range)."""
    ranges: dict[str, float] = {}
    for item in accept.split(","):
        media, *params = item.split(";")
        media = media.strip().lower()
        if not media:
            continue
        quality = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = min(1.0, max(0.0, float(value.strip())))
                except ValueError:
                    quality = 0.0
        ranges[media] = max(quality, ranges.get(media, 0.0))
    return ranges


def _quality(ranges: dict[str, float], media: str) -> float:
    """The quality ``Accept`` gives ``media``: the most specific matching range wins."""
    if media in ranges:
        return ranges[media]
    kind = media.split("/", 1)[0] + "/*"
    if kind in ranges:
        return ranges[kind]
    return ranges.get("*/*", 0.0)


def wants_ragged(accept: str | None) -> bool:
    """Whether to answer ``/encode`` ragged: only when ``Accept`` names it (never through a wildcard), above zero and
    at least as high as JSON and safetensors."""
    if accept is None or RAGGED_MEDIA_TYPE not in accept.lower():
        return False
    ranges = _media_ranges(accept)
    ragged = ranges.get(RAGGED_MEDIA_TYPE, 0.0)
    others = max(_quality(ranges, JSON_MEDIA_TYPE), _quality(ranges, SAFETENSORS_MEDIA_TYPE))
    return ragged > 0 and ragged >= others


def check_json_body(content_type: str | None, content_encoding: str | None) -> None:
    """415 unless JSON (no ``Content-Type``, ``application/json`` or any ``+json``), UTF-8, uncompressed."""
    if content_encoding is not None and content_encoding.strip().lower() not in ("", "identity"):
        raise ServiceError(
            HttpErrorKind.UNSUPPORTED_MEDIA_TYPE,
            f"Content-Encoding {content_encoding.strip()!r} is not supported: send the JSON body uncompressed",
        )
    if content_type is None:
        return
    media, *params = content_type.split(";")
    media = media.strip().lower()
    if media != JSON_MEDIA_TYPE and not media.endswith(_JSON_SUFFIX):
        raise ServiceError(
            HttpErrorKind.UNSUPPORTED_MEDIA_TYPE,
            f"the body must be JSON: send 'Content-Type: {JSON_MEDIA_TYPE}' (curl: -H 'Content-Type: "
            f"{JSON_MEDIA_TYPE}' or --json), not {media or 'an empty type'!r}",
        )
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip().strip('"').lower() not in ("utf-8", "utf8"):
            raise ServiceError(
                HttpErrorKind.UNSUPPORTED_MEDIA_TYPE,
                f"the body must be UTF-8 JSON, not charset={value.strip()}",
            )


def encode_answer_type(accept: str | None) -> str:
    """``/encode``'s media type for ``Accept``: ragged (:func:`wants_ragged`); safetensors when rated above zero and
    above JSON, or as high and by name (not a wildcard); else JSON (also when none is accepted: errors are JSON)."""
    if accept is None or accept == "*/*" or accept == JSON_MEDIA_TYPE:
        return JSON_MEDIA_TYPE  # the common cases, without parsing
    if accept == SAFETENSORS_MEDIA_TYPE:
        return SAFETENSORS_MEDIA_TYPE
    if wants_ragged(accept):
        return RAGGED_MEDIA_TYPE
    ranges = _media_ranges(accept)
    binary = _quality(ranges, SAFETENSORS_MEDIA_TYPE)
    json = _quality(ranges, JSON_MEDIA_TYPE)
    if binary > 0 and (binary > json or (binary == json and SAFETENSORS_MEDIA_TYPE in ranges)):
        return SAFETENSORS_MEDIA_TYPE
    return JSON_MEDIA_TYPE


def json_answer_type(accept: str | None) -> str:
    """The media type of a route that answers JSON only, whatever ``Accept`` says."""
    return JSON_MEDIA_TYPE
