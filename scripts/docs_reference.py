"""The docs site's reference pages, generated from the code at build time, so they cannot drift from it.

A page holds a marker, ``<!-- generated: NAME -->``, where the generator ``NAME`` of :data:`GENERATORS` puts
its Markdown. MkDocs runs this module as a hook (``hooks:`` in ``mkdocs.yml``): :func:`on_page_markdown`
fills the markers of every page as it is built, and :func:`on_page_content` turns the reST roles of the
docstrings mkdocstrings renders (``:class:`Foo```) into plain code. What each generator reads:

- ``http-routes``, ``http-options``, ``http-errors``: the app's route table (``create_app``, its OpenAPI
  schema for the statuses each route answers), the work routes (``service.http.routes.WORK_ROUTES``: request
  model, option set, media types), the option sets declared in ``service/wire.py`` (names, defaults, allowed
  values, bounds), the one status table (``service.wire.ERROR_TYPES``) and the error kinds.
- ``cli``: each command's ``--help``, from its own parser (``service.cli.COMMANDS``).
- ``settings``: the one settings object (``service.http.settings.Settings``: each field's flag, variable, default and
  description).

``python -m scripts.docs_reference NAME`` prints one of them. ``tests/shipping/test_docs_site.py`` checks the built
pages against the code both ways (everything in the code is in the reference, nothing else is).
"""

from __future__ import annotations

import argparse
import collections.abc
import contextlib
import dataclasses
import importlib
import inspect
import json
import os
import re
import sys
import types
import typing
from collections.abc import Callable, Iterator
from typing import Any

MARKER = re.compile(r"<!-- generated: ([a-z-]+) -->")
#: The width of the ``--help`` texts on the CLI page (argparse wraps to the terminal's).
HELP_COLUMNS = 100

# What each transformers option means, for the options that carry no ``doc`` in service/wire.py (theirs are
# transformers' own; the wire's own options carry their sentence there). The build fails when an option has
# neither, or when a sentence here names an option that no longer exists.
TRANSFORMERS_OPTIONS = {
    "add_special_tokens": "Add the tokenizer's special tokens (`[CLS] … [SEP]`, `<s>` …) as its post-processor says.",
    "padding": '`true`/`"longest"`: pad to the batch\'s longest row; `"max_length"`: to `max_length` (or '
    '`model_max_length`); `false`/`"do_not_pad"`: no padding.',
    "truncation": '`true`/`"longest_first"`, `"only_first"`, `"only_second"`: cut to `max_length`; '
    "`null`: on when `max_length` is given, as transformers decides.",
    "max_length": 'The most tokens per row (truncation) or the padded length (`padding="max_length"`).',
    "stride": "With `return_overflowing_tokens`: tokens each overflow row repeats from the row before.",
    "pad_to_multiple_of": "Round the padded length up to a multiple of this.",
    "padding_side": '`"left"` or `"right"`; `null`: the tokenizer\'s own.',
    "return_token_type_ids": "Return `token_type_ids`; `null`: as the tokenizer's `model_input_names` says.",
    "return_attention_mask": "Return `attention_mask`; `null`: as the tokenizer's `model_input_names` says.",
    "return_overflowing_tokens": "Return the cut-off tokens as extra rows, with `overflow_to_sample_mapping`.",
    "return_special_tokens_mask": "Return `special_tokens_mask` (1 for a special token).",
    "return_offsets_mapping": "Return `offset_mapping`: each token's `[start, end)` in characters of its text.",
    "return_length": "Return `length`: each row's length.",
    # apply_chat_template's own default differs: written as "OptionSet.name" (the option set's sentence wins)
    "ChatOptions.truncation": "`true`: cut each conversation to `max_length` (keeping its start); `false` (the "
    "default of `apply_chat_template`): `max_length` alone does not truncate.",
    "skip_special_tokens": "Leave special tokens out of the decoded text.",
    "clean_up_tokenization_spaces": "Remove spaces before punctuation; `null`: as the tokenizer's config says.",
}


# The kinds without a comment in the source: Starlette's own statuses, read back as kinds.
STARLETTE_KINDS = {"not_found": "no such route", "method_not_allowed": "the route does not take this method"}


# -- the HTTP API ------------------------------------------------------------------------------------------
def _app() -> Any:
    """The app as ``serve`` builds it, with default settings (nothing is loaded: the lifespan is not run)."""
    from service.http.app import create_app
    from service.http.settings import Settings

    return create_app(Settings(_env_file=None, api_key=None))  # type: ignore[call-arg]


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = _app().openapi()
    return schema


def _work_routes() -> tuple[Any, ...]:
    from service.http.routes import WORK_ROUTES

    return WORK_ROUTES


def _first_paragraph(text: str | None) -> str:
    paragraph = inspect.cleandoc(text or "").split("\n\n")[0]
    return _rst_to_markdown(" ".join(paragraph.split()))


def _rst_to_markdown(text: str) -> str:
    """reST literals and roles, as the code's docstrings write them, in Markdown."""
    text = re.sub(r":(?:class|func|meth|mod|data|attr|exc):`~?([^`]+)`", r"`\1`", text)
    return re.sub(r"``([^`]+)``", r"`\1`", text)


def routes() -> list[dict[str, Any]]:
    """Every route the app serves: path, methods (HEAD beside GET), what it does, whether it is in the schema
    and whether it needs the API key (when the server has one)."""
    from service.http.middleware import OPEN_PATHS

    by_path: dict[str, dict[str, Any]] = {}
    for route in _app().routes:
        methods = set(getattr(route, "methods", None) or ())
        entry = by_path.setdefault(
            route.path, {"path": route.path, "methods": set(), "doc": "", "in_schema": False, "open": False}
        )
        entry["methods"] |= methods
        endpoint = getattr(route, "endpoint", None)
        doc = getattr(route, "description", "") or (endpoint.__doc__ if endpoint is not None else "") or ""
        entry["doc"] = entry["doc"] or _first_paragraph(doc)
        entry["in_schema"] = entry["in_schema"] or bool(getattr(route, "include_in_schema", False))
        entry["open"] = route.path in OPEN_PATHS
    return list(by_path.values())


def http_routes() -> str:
    rows = ["| route | what it does | API key |", "|---|---|---|"]
    assets = []
    for route in routes():
        methods = " ".join(m for m in ("GET", "HEAD", "POST") if m in route["methods"])
        if not route["doc"]:  # a page's static file (script, style, icon): listed below the table
            assets.append(f"`{route['path']}`")
            continue
        key = "no" if route["open"] else "yes"
        rows.append(f"| `{methods} {route['path']}` | {route['doc']} | {key} |")
    return (
        "\n".join(rows)
        + "\n\nThe pages' static files, served without the key: "
        + ", ".join(assets)
        + ".\n\n*API key*: with `--api-key`, the routes marked *yes* need `Authorization: Bearer <key>` "
        "(401 without it).\n"
    )


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _type_of(declared: dataclasses.Field[Any], hints: dict[str, Any]) -> str:
    """An option's JSON type: its closed set of values, else its type as JSON names it."""
    from service.wire import MAX_U32, MINIMUM, VALUES

    values = declared.metadata.get(VALUES)
    if values is not None:
        return " \\| ".join(f"`{_json(v)}`" for v in values)
    hint = hints[declared.name]
    parts = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    kind = " \\| ".join(_json_type(part) for part in parts)
    if MINIMUM in declared.metadata:
        kind += f" ({declared.metadata[MINIMUM]} … {MAX_U32})"
    return kind


def _json_type(hint: Any) -> str:
    """A Python type as JSON names it: ``Sequence[Mapping[str, Any]]`` is an array of objects."""
    simple = {bool: "boolean", int: "integer", str: "string", float: "number", type(None): "null"}
    if hint in simple:
        return simple[hint]
    origin = typing.get_origin(hint)
    if origin is not None and issubclass(origin, collections.abc.Mapping):
        return "object"
    if origin is not None and issubclass(origin, collections.abc.Sequence):
        items = typing.get_args(hint)
        return f"array of {_json_type(items[0])}" if items else "array"
    return "any"


def option_sets() -> dict[str, type[Any]]:
    """path -> the option set (a dataclass of ``service.wire``) of each work route."""
    return {route.path: route.request.option_set for route in _work_routes()}


def options_of(option_set: type[Any]) -> list[dict[str, str]]:
    """An option set's rows: name, JSON type or values, default, meaning."""
    from service.wire import DOC

    hints = typing.get_type_hints(option_set)
    rows = []
    for declared in dataclasses.fields(option_set):
        meaning = (
            declared.metadata.get(DOC)
            or TRANSFORMERS_OPTIONS.get(f"{option_set.__name__}.{declared.name}")
            or TRANSFORMERS_OPTIONS.get(declared.name)
        )
        if not meaning:
            raise LookupError(
                f"{option_set.__name__}.{declared.name} has no meaning: give it doc= in service/wire.py, or a "
                "sentence in scripts/docs_reference.py's TRANSFORMERS_OPTIONS if it is transformers' own"
            )
        rows.append(
            {
                "name": declared.name,
                "type": _type_of(declared, hints),
                "default": _json(declared.default),
                "meaning": meaning,
            }
        )
    return rows


def _check_transformers_options() -> None:
    declared = {
        name
        for option_set in option_sets().values()
        for f in dataclasses.fields(option_set)
        for name in (f.name, f"{option_set.__name__}.{f.name}")
    }
    stale = sorted(set(TRANSFORMERS_OPTIONS) - declared)
    if stale:
        raise LookupError(f"scripts/docs_reference.py describes options no route has: {', '.join(stale)}")


def _statuses(schema: dict[str, Any], path: str, method: str) -> list[str]:
    responses = schema["paths"][path][method]["responses"]
    return sorted(status for status in responses if status != "200")


def http_options() -> str:
    """One section per work route: its body's inputs, its options (from the wire's option set), what it
    answers and which errors."""
    _check_transformers_options()
    schema = _schema()
    parts = []
    for route in _work_routes():
        option_set = route.request.option_set
        inputs = [
            (name, field)
            for name, field in route.request.model_fields.items()
            if name not in route.request.option_names
        ]
        lines = [f"### `POST {route.path}`", "", _rst_to_markdown(inspect.cleandoc(route.doc)), ""]
        lines += [
            f"Body: a JSON object. Options: `service.wire.{option_set.__name__}`.",
            "",
            "| field | type or values | default | meaning |",
            "|---|---|---|---|",
        ]
        properties = route.request.model_json_schema()["properties"]
        for name, field in inputs:
            required = "required" if field.is_required() else f"`{_json(field.default)}`"
            lines.append(f"| `{name}` | {_schema_type(properties[name])} | {required} | {field.description} |")
        for row in options_of(option_set):
            lines.append(f"| `{row['name']}` | {row['type']} | `{row['default']}` | {row['meaning']} |")
        media = ", ".join(f"`{m}`" for m in route.media_types)
        statuses = ", ".join(_statuses(schema, route.path, "post"))
        lines += ["", f"Answers (by `Accept`): {media}. Errors: {statuses} (see the status table).", ""]
        parts.append("\n".join(lines))
    return "\n".join(parts)


def _schema_type(schema: dict[str, Any]) -> str:
    """A field's type as its JSON schema says it: ``array of string``, ``array of array of integer``…"""
    if "$ref" in schema:
        return "object"
    if "anyOf" in schema:
        return " \\| ".join(_schema_type(part) for part in schema["anyOf"])
    kind = str(schema.get("type", "any"))
    if kind == "array":
        return f"array of {_schema_type(schema.get('items', {}))}"
    return kind


def _enum_comments(enum_class: type[Any]) -> dict[str, str]:
    """member value -> the comment written beside it in the source."""
    comments = {}
    for line in inspect.getsource(enum_class).splitlines():
        found = re.match(r'\s+[A-Z_]+ = "([a-z_]+)"\s*#\s*(.*)$', line)
        if found:
            comments[found.group(1)] = found.group(2)
    return comments


def error_kinds() -> list[dict[str, Any]]:
    """Every kind of error the service answers with: ``error_type``, status, where it is raised, meaning."""
    from service.engine.errors import ErrorKind
    from service.http.errors import HttpErrorKind
    from service.http.responses import STATUS_BY_KIND

    meanings = {**STARLETTE_KINDS, **_enum_comments(ErrorKind), **_enum_comments(HttpErrorKind)}
    return [
        {
            "kind": kind.value,
            "status": status,
            "layer": "engine" if isinstance(kind, ErrorKind) else "HTTP",
            "meaning": meanings.get(kind.value, ""),
        }
        for kind, status in STATUS_BY_KIND.items()
    ]


def http_errors() -> str:
    from service.wire import ERROR_FIELD, ERROR_TYPE_FIELD, ERROR_TYPES

    rows = [
        "| `error_type` | status | raised by | meaning | what a client does | the SDK raises |",
        "|---|---|---|---|---|---|",
    ]
    for kind in error_kinds():
        error = ERROR_TYPES[kind["kind"]]
        cells = (
            f"`{kind['kind']}`",
            str(kind["status"]),
            kind["layer"],
            kind["meaning"],
            _rst_to_markdown(error.advice),
            f"`{error.exception}`",
        )
        rows.append("| " + " | ".join(cells) + " |")
    return (
        f'Every error answer has one shape, `{{"{ERROR_FIELD}": "<what to fix>", "{ERROR_TYPE_FIELD}": "<kind>"}}`, '
        "and one status per kind, with the client exception it becomes (`service.wire.ERROR_TYPES`; the SDK reads "
        "the `error_type`, and the status only for an answer without one, e.g. a proxy's 502):\n\n"
        + "\n".join(rows)
        + "\n"
    )


def media_and_headers() -> str:
    from service import wire

    names = ("JSON_MEDIA_TYPE", "SAFETENSORS_MEDIA_TYPE", "RAGGED_MEDIA_TYPE", "FINGERPRINT_HEADER")
    comments = _constant_comments(wire)
    rows = ["| name in `service.wire` | value | meaning |", "|---|---|---|"]
    comments.setdefault("JSON_MEDIA_TYPE", "Request bodies, and answers unless `Accept` asks for another type.")
    for name in names:
        rows.append(f"| `{name}` | `{getattr(wire, name)}` | {_rst_to_markdown(comments[name])} |")
    return "\n".join(rows) + "\n"


def _constant_comments(module: Any) -> dict[str, str]:
    """constant name -> the ``#:`` comment above it in the module's source."""
    comments: dict[str, str] = {}
    pending: list[str] = []
    for line in inspect.getsource(module).splitlines():
        if line.startswith("#:"):
            pending.append(line[2:].strip())
            continue
        found = re.match(r"([A-Z_]+)(?::[^=]*)? = ", line)
        if found and pending:
            comments[found.group(1)] = " ".join(pending)
        pending = []
    return comments


# -- the CLI -----------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _help_width() -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in ("COLUMNS", "NO_COLOR", "PYTHON_COLORS")}
    os.environ.update(COLUMNS=str(HELP_COLUMNS), NO_COLOR="1", PYTHON_COLORS="0")
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    """``tokenizer-service`` and each of its commands -> its parser, as the command builds it."""
    from service import cli

    parsers = {cli.PROG: cli.build_parser()}
    for name, (module, _, _) in cli.COMMANDS.items():
        prog = f"{cli.PROG} {name}"
        parsers[prog] = importlib.import_module(module).build_parser(prog)
    return parsers


def cli_reference() -> str:
    parts = []
    with _help_width():
        for prog, parser in command_parsers().items():
            anchor = prog.replace(" ", "-")
            parts.append(f"## `{prog}` {{#{anchor}}}\n\n```text\n{parser.format_help().rstrip()}\n```\n")
    return "\n".join(parts)


# -- settings ----------------------------------------------------------------------------------------------
def settings_reference() -> str:
    from service.http.settings import Settings
    from service.wire import ENV_PREFIX

    rows = ["| flag | environment variable | default | what it does, and the trade-off |", "|---|---|---|---|"]
    for name, field in Settings.model_fields.items():
        default = "unset" if field.default is None else f"`{field.default}`"
        description = (field.description or "").replace("|", "\\|")
        flag = name.replace("_", "-")
        flag = f"--[no-]{flag}" if field.annotation is bool else f"--{flag}"
        rows.append(f"| `{flag}` | `{ENV_PREFIX}{name.upper()}` | {default} | {description} |")
    return "\n".join(rows) + "\n"


GENERATORS: dict[str, Callable[[], str]] = {
    "http-routes": http_routes,
    "http-options": http_options,
    "http-errors": http_errors,
    "http-media": media_and_headers,
    "cli": cli_reference,
    "settings": settings_reference,
}


def fill(markdown: str) -> str:
    """``markdown`` with every generated marker replaced by its generator's output."""

    def generated(found: re.Match[str]) -> str:
        name = found.group(1)
        if name not in GENERATORS:
            raise LookupError(f"unknown generated block {name!r}; known: {', '.join(GENERATORS)}")
        return GENERATORS[name]()

    return MARKER.sub(generated, markdown)


# -- the MkDocs hook -----------------------------------------------------------------------------------------
def on_config(config: Any) -> Any:
    """Refuse to build without ruff: mkdocstrings-python formats the Python reference's signatures with it, and
    without it (a venv without the docs extra's ruff) it only logs at INFO and writes each signature on one line,
    which the page wraps under the copy button."""
    try:
        from ruff.__main__ import find_ruff_bin  # (what mkdocstrings-python looks for)

        find_ruff_bin()
    except (ImportError, FileNotFoundError) as exc:
        from mkdocs.exceptions import PluginError

        raise PluginError(
            f"the Python reference's signatures are formatted by ruff, which this environment lacks ({exc}): "
            "pip install -e '.[docs]' (or make docs, which does)"
        ) from exc
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return fill(markdown)


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    # docstrings write reST roles (:class:`Foo`), which Markdown renders as ":class:" before the code
    return re.sub(r":(?:class|func|meth|mod|data|attr|exc):(<code>)~?", r"\1", html)


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in GENERATORS:
        sys.exit(f"usage: python -m scripts.docs_reference {{{','.join(GENERATORS)}}}")
    sys.stdout.write(GENERATORS[sys.argv[1]]())
