"""The HTTP face of the engine: it parses, authorises, counts and serialises, never tokenizes.
``create_app(Settings())`` builds the ASGI app; ``tokenizer-service serve`` (:mod:`.cli`) runs it under uvicorn."""

from .app import create_app
from .runtime import Runtime
from .settings import Settings

__all__ = ["create_app", "Runtime", "Settings"]
