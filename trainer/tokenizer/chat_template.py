"""Render a conversation with the tokenizer's own Jinja chat template, and find its assistant turns.

The environment is the one `transformers`' `apply_chat_template` renders in (sandboxed, blocks
trimmed, `loopcontrols`, `tojson`, `raise_exception`, `strftime_now`), so the text — and hence
the token ids — are the ones the model's users will feed it.

An assistant turn is what rendering the conversation through that turn adds to rendering the
turns before it with the generation prompt (`<|start_header_id|>assistant<|end_header_id|>\\n\\n`
in Llama 3): the reply and the template's end-of-turn token, nothing of the header. That works
for any template that renders a conversation as a prefix of its continuation, which is checked.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Any

from jinja2 import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

# A conversation's rendering must not change with the day it is tokenized on: a resumed run
# re-tokenizes its data and must see the same tokens. Templates that print today's date
# (Llama 3.2's "Today Date") get this fixed one, the default Llama 3.1's template falls back to.
_FIXED_NOW = datetime(2024, 7, 26)


class ChatTemplateError(ValueError):
    """This conversation cannot be rendered (the template refused it, or rendered it oddly)."""


@lru_cache(maxsize=4)
def compile_template(source: str) -> Any:
    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    def tojson(value: Any, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(
            value,
            ensure_ascii=ensure_ascii,
            indent=indent,
            separators=separators,
            sort_keys=sort_keys,
        )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = _FIXED_NOW.strftime
    return env.from_string(source)


def render_chat(
    template: str,
    messages: list[dict[str, Any]],
    special_tokens: dict[str, str],
    *,
    add_generation_prompt: bool = False,
) -> str:
    try:
        return compile_template(template).render(
            messages=messages,
            tools=None,
            documents=None,
            add_generation_prompt=add_generation_prompt,
            **special_tokens,
        )
    except TemplateError as exc:
        raise ChatTemplateError(f"the chat template refused it: {exc}") from None
    except (TypeError, KeyError, IndexError, AttributeError) as exc:
        raise ChatTemplateError(f"the chat template failed on it: {exc}") from None


def render_with_assistant_spans(
    template: str, messages: list[dict[str, Any]], special_tokens: dict[str, str]
) -> tuple[str, list[tuple[int, int]]]:
    """The conversation's text and the [start, end) character range of each assistant turn."""
    text = render_chat(template, messages, special_tokens)
    spans = []
    for index, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = render_chat(template, messages[:index], special_tokens, add_generation_prompt=True)
        through = render_chat(template, messages[: index + 1], special_tokens)
        if not (through.startswith(before) and text.startswith(through)):
            raise ChatTemplateError(
                "the chat template does not render the conversation up to an assistant turn as "
                "a prefix of the whole, so the turn's tokens cannot be located"
            )
        if len(through) > len(before):
            spans.append((len(before), len(through)))
    return text, spans
