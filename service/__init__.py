"""tokenizer-service: HuggingFace fast tokenization as a service, so DataLoader workers never fork a
Rust thread pool. The server is ``service.engine`` (the tokenizer, its queue and memory bounds; no HTTP) behind
``service.http`` (the web layer); ``service.wire`` is the contract both the server and ``service.client`` import.
Training code only needs ``service.client`` (which imports neither tokenizers nor transformers nor fastapi).

The embedded default tokenizer ships in every install: :data:`DEFAULT_TOKENIZER` (``"embedded:default"``) is
its name for every command (``serve --model``, ``train --like``, ``TokenizerClient.launch``), and
:data:`DEFAULT_TOKENIZER_DIR` its folder, for ``AutoTokenizer.from_pretrained`` (:mod:`service.embedded`)."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .embedded import DEFAULT_TOKENIZER, DEFAULT_TOKENIZER_DIR

__version__ = "0.1.0"
__all__ = ["DEFAULT_TOKENIZER", "DEFAULT_TOKENIZER_DIR", "__version__"]


def __getattr__(name: str) -> Any:
    if name in ("DEFAULT_TOKENIZER", "DEFAULT_TOKENIZER_DIR"):  # imported when asked for: `import service.client`
        from . import embedded  # stays the SDK alone

        return getattr(embedded, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
