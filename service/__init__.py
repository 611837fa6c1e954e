"""tokenizer-service: HuggingFace fast tokenization as a service, so DataLoader workers never fork a
Rust thread pool. The server is ``service.engine`` (the tokenizer, its queue and memory bounds; no HTTP) behind
``service.http`` (the web layer); ``service.wire`` is the contract both the server and ``service.client`` import.
Training code only needs ``service.client`` (which imports neither tokenizers nor transformers nor fastapi)."""

__version__ = "0.1.0"
