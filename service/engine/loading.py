"""Loading a tokenizer from a file, a directory, an object store or the hub, through transformers (so its config
comes from where the user's training code reads it), and fingerprinting it."""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import socket
import sys
import threading
import urllib.request
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..embedded import DEFAULT_TOKENIZER, DEFAULT_TOKENIZER_DIR
from ..suggestions import closest
from ..wire import FINGERPRINT_PREFIX
from .encoding import TokenizerFacts

logger = logging.getLogger(__name__)


def _no_torch_notice(record: logging.LogRecord) -> bool:
    """Drops transformers' "PyTorch was not found" line: the server runs without torch on purpose."""
    return not str(record.msg).startswith("PyTorch was not found")


TORCH_NOTICE_FILTER = _no_torch_notice
logging.getLogger("transformers").addFilter(TORCH_NOTICE_FILTER)  # before transformers is imported (below)

#: The start of the warning transformers prints, bare, at a process's first decode of a BPE tokenizer whose
#: clean-up it skips; the server says what that means once, at load, in its own format (:func:`_bpe_clean_up_line`).
_BPE_CLEAN_UP_WARNING = "Ignoring clean_up_tokenization_spaces=True for BPE tokenizer"


def _no_bpe_clean_up_warning(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(_BPE_CLEAN_UP_WARNING)


logging.getLogger("transformers.tokenization_utils_tokenizers").addFilter(_no_bpe_clean_up_warning)


def keep_torch_out() -> bool:
    """In a command's own process that never needs torch (``serve``, ``train``): make torch unimportable before
    transformers loads, so that a server started from a training venv (``launch()``, replicas) is the server the
    image runs. transformers imports torch for its model code whenever it is installed (configuration_utils, rope
    utils), which no tokenizer uses: measured here, a server is ready in 1.37 s instead of 2.37 s and holds 114 MB
    RSS instead of 295 MB. Returns whether it did: not where torch or transformers is loaded already."""
    if "torch" in sys.modules or "transformers" in sys.modules:
        return False
    sys.modules["torch"] = None  # type: ignore[assignment]  # importlib's find_spec says absent, import raises
    return True


class TokenizerLoadError(Exception):
    """The tokenizer source could not be loaded; the message is one readable line naming the source."""


@dataclass(frozen=True)
class LoadedTokenizer:
    """A fast transformers tokenizer plus what identifies it."""

    tokenizer: Any  # transformers.PreTrainedTokenizerFast (TokenizersBackend)
    source: str
    revision: str | None
    fingerprint: str


def load_tokenizer(source: str | None, revision: str | None = None, *, option: str = "--model") -> LoadedTokenizer:
    """Load ``source`` (file, directory, object-store URL, hub id; None or ``embedded:default``) as a fast
    tokenizer; ``option`` is the flag it came with, named in the errors' advice."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if source == DEFAULT_TOKENIZER:  # the embedded default's name; None means it too
        if revision is not None:
            raise TokenizerLoadError(f"--revision applies to hub ids, not to the embedded default ({source})")
        source = None
    display = DEFAULT_TOKENIZER if source is None else source
    source = _fetched(source)
    path = None if source is None else Path(source).expanduser()
    try:
        if path is None:
            tokenizer = AutoTokenizer.from_pretrained(str(DEFAULT_TOKENIZER_DIR), trust_remote_code=False)
        elif path.is_file():
            if revision is not None:
                raise TokenizerLoadError(f"--revision applies to hub ids, not to the file {source!r}")
            tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(path))
        elif path.is_dir():
            tokenizer = AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
        elif looks_like_a_path(display):
            raise TokenizerLoadError(
                f"cannot load tokenizer {source!r}: {no_such_path(path)}; {option} "
                "takes a tokenizer.json file, a tokenizer directory or a hub model id (org/name)"
            )
        else:
            try:
                tokenizer = _from_hub(display, revision, option)
            except Exception as exc:  # a hub id and a relative path look alike: say what each gave
                reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise TokenizerLoadError(
                    f"cannot load tokenizer {display!r}: not a local path ({no_such_path(path)}) and not from the "
                    f"hub: {reason}"
                ) from exc
    except TokenizerLoadError:
        raise
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError... for the same failures
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise TokenizerLoadError(f"cannot load tokenizer {display!r}: {first_line}") from exc

    tokenizer = _ensure_fast(tokenizer, display)
    if path is not None and path.is_dir():
        display, revision = _baked_origin(path, display, revision)
    backend = tokenizer.backend_tokenizer
    # transformers keeps no padding/truncation state between calls; start from the same clean slate.
    backend.no_padding()
    backend.no_truncation()
    backend.encode_special_tokens = bool(getattr(tokenizer, "split_special_tokens", False))
    said = _bpe_clean_up_line(tokenizer, display)
    if said is not None:
        logger.info("%s", said)
    return LoadedTokenizer(tokenizer, display, revision, fingerprint(tokenizer))


def _bpe_clean_up_line(tokenizer: Any, display: str) -> str | None:
    """What a BPE tokenizer's ``clean_up_tokenization_spaces=True`` means for ``/decode``, where it asks for a
    clean-up transformers 5 skips (``TokenizersBackend._decode``: a BPE model, unless
    :data:`_BPE_CLEAN_UP` is set); None where the setting is applied, or off."""
    skipped = (
        type(tokenizer.backend_tokenizer.model).__name__ == "BPE"
        and bool(getattr(tokenizer, "clean_up_tokenization_spaces", False))
        and not getattr(tokenizer, _BPE_CLEAN_UP, False)
    )
    if not skipped:
        return None
    return (
        f"{display}: its clean_up_tokenization_spaces=True changes nothing: transformers skips that clean-up for a BPE "
        "model (it would strip spaces before punctuation), so /decode, as transformers, answers the decoder's text as "
        "is, whatever clean_up_tokenization_spaces a request sends"
    )


def describe_source(source: str | None, revision: str | None = None) -> str:
    """What ``load_tokenizer`` will load, said before a load that may take minutes (``hub id org/name``...)."""
    if source is None or source == DEFAULT_TOKENIZER:
        return f"the embedded default tokenizer ({DEFAULT_TOKENIZER_DIR})"
    if "://" in source and not source.startswith(("hf://", "file://")):
        return f"{source} (downloaded from its object store first)"
    path = Path(source).expanduser()
    if path.is_file():
        return f"the file {path.absolute()}"
    if path.is_dir():
        return f"the directory {path.absolute()}"
    if looks_like_a_path(source):
        return f"the local path {path.absolute()}"
    at = f" at revision {revision}" if revision else ""
    return f"hub id {source}{at} (from the hub, or the HF cache when the hub cannot be reached)"


def no_such_path(path: Path) -> str:
    """``no such file or directory: /abs/path``, with the nearest name when one is close."""
    resolved = path.absolute()
    said = f"no such file or directory: {resolved}"
    if not path.is_absolute():
        said += " (resolved from the working directory)"
    try:
        siblings = [entry.name for entry in resolved.parent.iterdir()]
    except OSError:
        return said
    meant = closest(resolved.name, siblings)
    if meant is not None:
        said += f"; did you mean {path.parent / meant if str(path.parent) != '.' else meant}?"
    return said


def looks_like_a_path(source: str) -> bool:
    """Whether ``source`` can only be a local path (``./x``, ``/x``, ``~/x``, ``a/b/c``, ``x.json``, a backslash)."""
    if "://" in source:
        return False
    return (
        source.startswith(("/", "./", "../", "~", ".\\"))
        or source in (".", "..")
        or source.count("/") > 1
        or "\\" in source
        or source.endswith(".json")
    )


#: The longest wait for the hub to answer a connection before a hub id is given up (or read from the cache).
HUB_CONNECT_SECONDS = 5.0


def _from_hub(source: str, revision: str | None, option: str) -> Any:
    """A hub id. huggingface_hub retries an unreachable hub for ~50 s before its cache, so one bounded connection
    is tried first: unreachable, the tokenizer comes from the cache or the error says what to do offline."""
    from huggingface_hub import constants
    from transformers import AutoTokenizer

    load = functools.partial(AutoTokenizer.from_pretrained, source, revision=revision, trust_remote_code=False)
    offline_hint = (
        f"offline, pass {option} DIR, a local copy (a tokenizer directory, or its tokenizer.json), or put it in "
        "the HF cache (HF_HOME) and set HF_HUB_OFFLINE=1"
    )
    if constants.HF_HUB_OFFLINE:
        try:
            return load()
        except OSError as exc:
            raise TokenizerLoadError(
                f"HF_HUB_OFFLINE is set and it is not in the HF cache ({constants.HF_HUB_CACHE}); {offline_hint}"
            ) from exc
    unreachable = hub_unreachable(constants.ENDPOINT, HUB_CONNECT_SECONDS)
    if unreachable is None:
        return load()
    try:
        tokenizer = load(local_files_only=True)
    except OSError as exc:
        raise TokenizerLoadError(
            f"the hub ({constants.ENDPOINT}) cannot be reached ({unreachable}) and it is not in the HF cache "
            f"({constants.HF_HUB_CACHE}); {offline_hint}"
        ) from exc
    logger.warning(
        "the hub (%s) cannot be reached (%s): serving %r from the HF cache", constants.ENDPOINT, unreachable, source
    )
    return tokenizer


def hub_unreachable(endpoint: str, timeout: float) -> str | None:
    """Why a TCP connection to ``endpoint`` (or its proxy) fails within ``timeout``, even if resolving hangs."""
    url = urlsplit(endpoint)
    host, port = url.hostname or "", url.port or (443 if url.scheme == "https" else 80)
    proxy = urllib.request.getproxies().get(url.scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        proxied = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        host, port = proxied.hostname or "", proxied.port or 80
    outcome: list[str | None] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            outcome.append(None)
        except OSError as exc:
            outcome.append(exc.strerror or str(exc) or type(exc).__name__)

    # getaddrinfo takes no timeout: resolve and connect on a thread, and wait for it no longer than that
    attempt = threading.Thread(target=connect, name="hub-probe", daemon=True)
    attempt.start()
    attempt.join(timeout)
    return outcome[0] if outcome else f"no answer from {host}:{port} within {timeout:g}s"


def _fetched(source: str | None) -> str | None:
    """A tokenizer under an object-store URL, downloaded whole to a private local directory; else ``source``."""
    if source is None or "://" not in source or source.startswith(("hf://", "file://")):
        return source
    from ..jobs.tokenizer_fetch import fetch_tokenizer  # fsspec and the store's package, only for URLs

    try:
        return fetch_tokenizer(source)
    except Exception as exc:  # the store's refusal (a StorageError naming the URL), as any load failure
        raise TokenizerLoadError(f"cannot load tokenizer {source!r}: {exc}") from exc


def _baked_origin(directory: Path, display: str, revision: str | None) -> tuple[str, str | None]:
    """The hub origin (model id, commit) a baked directory names in source.json (deploy/bake_tokenizer.py)."""
    try:
        origin = json.loads((directory / "source.json").read_text())
        return str(origin["model"]), origin.get("commit") or origin.get("revision")
    except (OSError, ValueError, KeyError, TypeError):
        return display, revision


def _ensure_fast(tokenizer: Any, display: str) -> Any:
    if getattr(tokenizer, "is_fast", False):
        return tokenizer
    try:
        from transformers import PreTrainedTokenizerFast
        from transformers.convert_slow_tokenizer import convert_slow_tokenizer

        converted = PreTrainedTokenizerFast(
            tokenizer_object=convert_slow_tokenizer(tokenizer),
            model_max_length=tokenizer.model_max_length,
            padding_side=tokenizer.padding_side,
            truncation_side=tokenizer.truncation_side,
            model_input_names=tokenizer.model_input_names,
            **tokenizer.special_tokens_map,
        )
    except Exception as exc:
        reason = str(exc).strip().split(". ")[0].splitlines()[0]
        raise TokenizerLoadError(
            f"cannot serve tokenizer {display!r}: it has no fast (Rust) version and transformers cannot "
            f"convert {type(tokenizer).__name__} ({reason}); provide a tokenizer.json"
        ) from exc
    logger.warning("converted slow tokenizer %s of %r to a fast one", type(tokenizer).__name__, display)
    return converted


def call_config(tokenizer: Any) -> dict[str, Any]:
    """Everything outside tokenizer.json some route's output depends on, read as the routes read it: option
    resolution (:class:`~.encoding.TokenizerFacts`), ``split_special_tokens``, what ``batch_decode`` reads
    besides the ids, the chat templates and the special tokens (template variables, ids in ``/info``)."""
    templates, variables = chat_template_inputs(tokenizer)
    return {
        "encode": {
            **asdict(TokenizerFacts.of(tokenizer)),
            "split_special_tokens": bool(getattr(tokenizer, "split_special_tokens", False)),
        },
        "decode": {
            "tokenizer_class": type(tokenizer).__name__,
            "clean_up_tokenization_spaces": bool(getattr(tokenizer, "clean_up_tokenization_spaces", False)),
            _BPE_CLEAN_UP: bool(getattr(tokenizer, _BPE_CLEAN_UP, False)),
        },
        "chat_templates": templates,
        "special_tokens": variables,
    }


#: transformers' switch that lets ``clean_up_tokenization_spaces`` apply to a BPE model's decode too.
_BPE_CLEAN_UP = "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output"


def chat_template_inputs(tokenizer: Any) -> tuple[str | dict[str, str] | None, dict[str, Any]]:
    """The chat template(s) (one body, the named ones, or None) and the special tokens transformers passes
    every template (``bos_token``...): read once here for :class:`~.chat.ChatTemplates` and the fingerprint."""
    templates = tokenizer.chat_template
    if isinstance(templates, Mapping):
        templates = {str(name): str(body) for name, body in sorted(templates.items())}
    variables = {  # as JSON holds them: a string, or a list of strings (``additional_special_tokens``)
        name: [str(item) for item in value] if isinstance(value, (list, tuple)) else str(value)
        for name, value in sorted(tokenizer.special_tokens_map.items())
    }
    return templates, variables


def special_token_ids(tokenizer: Any) -> dict[str, int]:
    """The id of each named special token (``eos_token`` -> 2...), lists left out (``pretokenize --append-eos``)."""
    ids = {}
    for name, token in sorted(tokenizer.special_tokens_map.items()):
        if isinstance(token, str):
            token_id = tokenizer.convert_tokens_to_ids(token)
            if isinstance(token_id, int):
                ids[name] = token_id
    return ids


def fingerprint(tokenizer: Any) -> str:
    """A stable hash of tokenizer.json (without its padding and truncation state) plus :func:`call_config`:
    same tokenizer, same fingerprint, on any machine and from wherever it was loaded."""
    backend_json = json.loads(tokenizer.backend_tokenizer.to_str())
    backend_json.pop("padding", None)
    backend_json.pop("truncation", None)
    canonical = json.dumps(
        {"tokenizer": backend_json, "config": call_config(tokenizer)},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return FINGERPRINT_PREFIX + hashlib.sha256(canonical.encode("utf-8")).hexdigest()
