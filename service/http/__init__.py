"""The HTTP face of the engine: app factory, routes, middleware, the status table, settings, launcher.

It parses, authorises, counts and serialises; it never tokenizes. ``create_app(Settings())`` builds the
ASGI app; ``tokenizer-service serve`` (``service.http.cli``) runs it under uvicorn with a graceful drain.
"""

from .app import create_app
from .runtime import Runtime
from .settings import Settings

__all__ = ["create_app", "Runtime", "Settings"]
