"""tokenizer-service: HuggingFace fast tokenization as a service, so DataLoader workers never fork a Rust thread
pool. ``service.engine`` (the tokenizer, its queue, no HTTP) serves behind ``service.http``; ``service.wire`` is
the contract both it and ``service.client`` (training code's one import: no tokenizers, transformers or fastapi)
import. :data:`DEFAULT_TOKENIZER` (``"embedded:default"``) names the embedded default tokenizer for every command,
:data:`DEFAULT_TOKENIZER_DIR` is its folder (:mod:`service.embedded`)."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .embedded import DEFAULT_TOKENIZER, DEFAULT_TOKENIZER_DIR

__version__ = "0.1.0"
__all__ = ["DEFAULT_TOKENIZER", "DEFAULT_TOKENIZER_DIR", "__version__"]


def __getattr__(name: str) -> Any:
    if name in ("DEFAULT_TOKENIZER", "DEFAULT_TOKENIZER_DIR"):  # lazy: `import service.client` stays the SDK alone
        from . import embedded

        return getattr(embedded, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
