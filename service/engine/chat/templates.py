"""The served tokenizer's chat templates (:class:`ChatTemplates`) and the checks of a chat request, on the event
loop: :meth:`ChatTemplates.prepare` checks it and resolves its template, ready to render (:class:`PreparedChats`).
Nothing here calls into the Rust tokenizer."""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...extras import install_command
from ...wire import ASSISTANT_MASK_SOURCES, PADDING_SIDES, ChatOptions, EncodeOptions
from ..encoding import TokenizerFacts, plan_encode
from ..errors import ErrorKind, ServiceError
from ..loading import chat_template_inputs
from .limits import RenderLimits

#: The longest part of a template's own error message repeated to the caller.
_MAX_ERROR_DETAIL = 300
#: transformers' test for generation markers in a template (``render_jinja_template``).
_GENERATION_MARKER = re.compile(r"\{\%-?\s*generation\s*-?\%\}")


@functools.cache
def _reserved_template_variables() -> frozenset[str]:
    """Names ``chat_template_kwargs`` cannot set: in transformers they bind to ``apply_chat_template``'s own
    parameters, or collide with the render's ``messages``."""
    from transformers import PreTrainedTokenizerBase

    parameters = inspect.signature(PreTrainedTokenizerBase.apply_chat_template).parameters
    return frozenset(parameters.keys() - {"self", "kwargs"} | {"messages"})


@dataclass(frozen=True)
class _Template:
    name: str | None  # None: a body from the request, or the tokenizer's one unnamed template
    body: str

    def describe(self) -> str:
        return "the chat template" if self.name is None else f"the chat template {self.name!r}"

    @property
    def has_markers(self) -> bool:
        return _GENERATION_MARKER.search(self.body) is not None

    def compile(self) -> Any:
        """transformers' compiled template (cached by transformers), or a ServiceError: TOKENIZER when the
        template does not compile, INTERNAL when this install cannot compile any (jinja2 missing)."""
        from transformers.utils import chat_template_utils as ctu

        try:
            return ctu._compile_jinja_template(self.body)
        except ImportError as exc:
            raise ServiceError(
                ErrorKind.INTERNAL,
                f"this server cannot render chat templates: its install lacks a package ({_detail(exc)}); neither "
                f"the tokenizer nor the request is at fault: the server needs {install_command('server')}",
            ) from None
        except Exception as exc:  # noqa: BLE001 -- jinja raises TemplateSyntaxError, the sandbox others
            raise ServiceError(ErrorKind.TOKENIZER, f"{self.describe()} does not compile: {_detail(exc)}") from None


def _detail(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= _MAX_ERROR_DETAIL else text[: _MAX_ERROR_DETAIL - 3] + "..."


@dataclass(frozen=True)
class PreparedChats:
    """A checked request, ready to render."""

    conversations: Sequence[Sequence[Mapping[str, Any]]]
    options: ChatOptions
    template: _Template
    template_variables: Mapping[str, Any]  # the special tokens, then chat_template_kwargs over them
    limits: RenderLimits
    encode_options: EncodeOptions


class ChatTemplates:
    """The chat templates and the variables transformers gives every template, read once at load."""

    def __init__(
        self,
        templates: str | Mapping[str, str] | None,
        special_tokens: Mapping[str, Any],
        facts: TokenizerFacts,
        *,
        allow_template_bodies: bool = False,
    ) -> None:
        self._single = templates if isinstance(templates, str) else None
        self._named = dict(templates) if isinstance(templates, Mapping) else {}
        self.special_tokens = dict(special_tokens)
        self.facts = facts
        self.allow_template_bodies = allow_template_bodies
        #: name ("" for the one unnamed template) -> why it cannot be rendered, for the start-up log and /info
        self.unusable: dict[str, str] = {}
        for name, body in self._bodies().items():
            try:
                _Template(name or None, body).compile()
            except ServiceError as error:
                self.unusable[name] = error.message

    @classmethod
    def of(
        cls, tokenizer: Any, *, facts: TokenizerFacts | None = None, allow_template_bodies: bool = False
    ) -> ChatTemplates:
        """The templates of a loaded transformers tokenizer (``facts``: when already read)."""
        templates, variables = chat_template_inputs(tokenizer)  # what the fingerprint covers, read the same way
        return cls(
            templates,
            variables,
            facts or TokenizerFacts.of(tokenizer),
            allow_template_bodies=allow_template_bodies,
        )

    @property
    def names(self) -> list[str]:
        return sorted(self._named)

    def _bodies(self) -> dict[str, str]:
        """name ("" for the one unnamed template) -> template body."""
        return {"": self._single} if self._single is not None else dict(sorted(self._named.items()))

    def info(self) -> dict[str, Any]:
        """For ``/info``."""
        bodies = self._bodies()
        return {
            "chat_template": bool(bodies),
            "chat_template_names": self.names,
            "generation_markers": {name: _GENERATION_MARKER.search(body) is not None for name, body in bodies.items()},
            "template_bodies_allowed": self.allow_template_bodies,
            "unusable": dict(self.unusable),
        }

    def prepare(
        self,
        conversations: Sequence[Any],
        options: ChatOptions,
        limits: RenderLimits = RenderLimits(),
        *,
        tokenize: bool = True,
    ) -> PreparedChats:
        """Check a request and resolve its template, or raise a ServiceError (INVALID_REQUEST: fix the request;
        TOKENIZER: the template cannot serve it). ``tokenize=False``: rendering alone, without the encode's checks."""
        if not tokenize and options.return_assistant_tokens_mask:
            raise ServiceError(
                ErrorKind.INVALID_REQUEST,
                "return_assistant_tokens_mask marks tokens, and rendering alone makes none (transformers refuses it "
                "with tokenize=False): ask for the encode of the conversations",
            )
        _check_options(options)
        if not conversations:
            raise ServiceError(ErrorKind.INVALID_REQUEST, "conversations must hold at least one conversation")
        if len(conversations) > limits.max_conversations:
            raise ServiceError(
                ErrorKind.TOO_LARGE,
                f"{len(conversations)} conversations exceed max_texts_per_request={limits.max_conversations}; "
                "split the batch",
            )
        for i, conversation in enumerate(conversations):
            _check_conversation(i, conversation, options)
        if tokenize:  # the encode's refusals, before anything is rendered
            plan_encode(self.facts, options.as_encode_options())
        template = self._resolve(options.chat_template, options.tools)
        if options.return_assistant_tokens_mask and options.assistant_masks_from == "generation":
            if not template.has_markers:
                raise ServiceError(
                    ErrorKind.TOKENIZER,
                    f"return_assistant_tokens_mask needs to know which tokens the assistant wrote, and "
                    f"{template.describe()} has no {{% generation %}} markers to say so: transformers would return "
                    'an all-zero mask. Send "assistant_masks_from": "turns" to mark each assistant message\'s '
                    "rendered turn instead (exact, or refused for a template that rewrites earlier turns), or use a "
                    "template with generation markers",
                )
        variables = {**self.special_tokens, **(options.chat_template_kwargs or {})}
        return PreparedChats(conversations, options, template, variables, limits, options.as_encode_options())

    def _resolve(self, name: str | None, tools: Sequence[Any] | None) -> _Template:
        """transformers' ``get_chat_template``, refusing where it would silently render a name as a template."""
        if self._named:
            if name is None:
                if tools is not None and "tool_use" in self._named:
                    name = "tool_use"
                elif "default" in self._named:
                    name = "default"
                else:
                    raise ServiceError(
                        ErrorKind.TOKENIZER,
                        f"this tokenizer has several chat templates and no default: name one with chat_template "
                        f"(names: {self.names})",
                    )
            if name in self._named:
                return _Template(name, self._named[name])
        elif name is None:
            if self._single is None:
                raise ServiceError(
                    ErrorKind.TOKENIZER,
                    "this tokenizer has no chat template: serve a tokenizer whose tokenizer_config.json or "
                    "chat_template.jinja carries one",
                )
            return _Template(None, self._single)
        if self.allow_template_bodies:
            return _Template(None, name)
        shown = repr(name) if len(name) <= 64 and "\n" not in name else "(a template body)"
        names = f"its templates are {self.names}" if self._named else "it has one unnamed template: omit chat_template"
        if self._single is None and not self._named:
            names = "it has no chat template"
        raise ServiceError(
            ErrorKind.INVALID_REQUEST,
            f"chat_template {shown} is not one of this tokenizer's chat templates ({names}); template bodies "
            "in requests are refused unless the server is started with --allow-chat-template-bodies",
        )


def _check_options(options: ChatOptions) -> None:
    invalid = ErrorKind.INVALID_REQUEST
    if options.add_generation_prompt and options.continue_final_message:
        raise ServiceError(
            invalid,
            "add_generation_prompt and continue_final_message cannot be used together: add_generation_prompt opens "
            "a new assistant message, continue_final_message leaves the last one open to be continued",
        )
    if options.continue_final_message and options.return_assistant_tokens_mask:
        raise ServiceError(invalid, "continue_final_message cannot be used with return_assistant_tokens_mask")
    if not isinstance(options.continue_final_message, (bool, str)):
        raise ServiceError(invalid, "continue_final_message must be a boolean or the name of a message field")
    if options.assistant_masks_from not in ASSISTANT_MASK_SOURCES:
        raise ServiceError(
            invalid,
            f"assistant_masks_from must be one of {list(ASSISTANT_MASK_SOURCES)}, not {options.assistant_masks_from!r}",
        )
    if options.padding_side is not None and options.padding_side not in PADDING_SIDES:
        raise ServiceError(invalid, f"padding_side must be one of {list(PADDING_SIDES)} or null")
    for field in ("tools", "documents"):
        value = getattr(options, field)
        if value is None:
            continue
        if not isinstance(value, Sequence) or isinstance(value, str):
            raise ServiceError(invalid, f"{field} must be a list of objects")
        for j, item in enumerate(value):
            if not isinstance(item, Mapping):
                what = "a JSON schema object" if field == "tools" else "an object (e.g. with title and text)"
                raise ServiceError(invalid, f"{field}[{j}] must be {what}")
    kwargs = options.chat_template_kwargs
    if kwargs is not None:
        if not isinstance(kwargs, Mapping) or not all(isinstance(key, str) for key in kwargs):
            raise ServiceError(invalid, "chat_template_kwargs must be an object of template variables")
        reserved = sorted(_reserved_template_variables().intersection(kwargs))
        if reserved:
            raise ServiceError(
                invalid,
                f"chat_template_kwargs cannot set {reserved}: transformers passes those itself (set the option of "
                "that name instead, where there is one)",
            )


def _check_conversation(i: int, conversation: Any, options: ChatOptions) -> None:
    invalid = ErrorKind.INVALID_REQUEST
    if not isinstance(conversation, Sequence) or isinstance(conversation, (str, bytes)):
        raise ServiceError(invalid, f"conversations[{i}] must be a list of messages")
    if not conversation:
        raise ServiceError(invalid, f"conversations[{i}] is empty: a conversation needs at least one message")
    for j, message in enumerate(conversation):
        if not isinstance(message, Mapping):
            raise ServiceError(
                invalid, f'conversations[{i}][{j}] is not an object: a message is {{"role": ..., "content": ...}}'
            )
        role = message.get("role")
        if role is None:
            raise ServiceError(invalid, f"conversations[{i}][{j}] has no role")
        if not isinstance(role, str):
            raise ServiceError(invalid, f"conversations[{i}][{j}].role must be a string")
    if options.continue_final_message and conversation[-1].get("role") != "assistant":
        raise ServiceError(
            invalid,
            f"conversations[{i}]: continue_final_message leaves the last message open for the model to continue, so "
            "it must be the assistant's; to have the model answer a user message, use add_generation_prompt",
        )
