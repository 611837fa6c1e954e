"""tokenizer-service: HuggingFace fast tokenization as a service, so DataLoader workers never fork a
Rust thread pool. The server lives in ``service.app``/``service.engine``; training code only needs
``service.client`` (which imports neither tokenizers nor transformers nor fastapi)."""

__version__ = "0.1.0"
