"""Plain sentences for bad MCP tool arguments: one per argument, in the CLI's words.

The SDK answers a call whose arguments fail validation with pydantic's report (error types,
input dumps, a documentation URL). :func:`argument_errors` says instead what each bad argument
must be, from the tool's published input schema and pydantic's structured ``errors()`` list:
"k must be between 1 and 50, got 0.", "k must be a whole number between 1 and 50, got "many".",
"query is required: what to look for, in natural language.". :func:`unknown_arguments` refuses
names the tool does not take (pydantic would silently drop them). :class:`ArgumentCheck` puts
both in front of the server's tools.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Extension
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolRequestParams, CallToolResult, TextContent
from pydantic import ValidationError
from pydantic_core import ErrorDetails

SHOWN_CHARS = 60
"""A rejected value is quoted up to this many characters."""


def unknown_arguments(
    tool: str, schema: Mapping[str, Any], arguments: Mapping[str, Any]
) -> list[str]:
    """One sentence per argument name the tool's input schema does not have."""
    known = list(schema.get("properties", {}))
    takes = f"{tool} takes {', '.join(known)}" if known else f"{tool} takes no arguments"
    return [f"Unknown argument {_shown(name)}: {takes}." for name in arguments if name not in known]


def argument_errors(schema: Mapping[str, Any], errors: Sequence[ErrorDetails]) -> list[str]:
    """One sentence per bad argument (the first error of each), in the order pydantic found them."""
    properties = schema.get("properties", {})
    sentences: dict[str, str] = {}
    for error in errors:
        name = str(error["loc"][0]) if error["loc"] else "arguments"
        if name not in sentences:
            sentences[name] = _sentence(name, properties.get(name, {}), error)
    return list(sentences.values())


def _sentence(name: str, prop: Mapping[str, Any], error: ErrorDetails) -> str:
    if error["type"] == "missing":
        description = str(prop.get("description", "")).rstrip(".")
        detail = f": {description[:1].lower()}{description[1:]}" if description else ""
        return f"{name} is required{detail}."
    value = error.get("input")
    kind = prop.get("type")
    if kind == "integer":
        return _integer_sentence(name, prop, error["type"], value)
    if kind == "boolean":
        return f"{name} must be true or false, got {_shown(value)}."
    if kind == "string" and "enum" in prop:
        return f"{name} must be one of {', '.join(prop['enum'])}, got {_shown(value)}."
    if kind == "string":
        return f"{name} must be a string, got {_shown(value)}."
    if kind == "number":
        return f"{name} must be a number, got {_shown(value)}."
    if kind == "array":
        return f"{name} must be a glob or a list of globs, got {_shown(value)}."
    message = error["msg"].removeprefix("Value error, ")
    return f"{name} is not valid ({message}), got {_shown(value)}."


def _integer_sentence(name: str, prop: Mapping[str, Any], error_type: str, value: Any) -> str:
    low, high = prop.get("minimum"), prop.get("maximum")
    if low is not None and high is not None:
        bound = f"between {low} and {high}"
    elif low is not None:
        bound = f"at least {low}"
    else:
        bound = ""
    whole = f"a whole number {'of ' if low is not None and high is None else ''}{bound}".strip()
    if isinstance(value, bool):
        return f"{name} must be {whole}, not true/false."
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if error_type == "value_error" and bound:  # a whole number, out of range
        return f"{name} must be {bound}, got {_shown(value)}."
    return f"{name} must be {whole}, got {_shown(value)}."


def _shown(value: Any) -> str:
    """The value as JSON (how the client sent it), cut after SHOWN_CHARS characters."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


class ArgumentCheck(Extension):
    """Answers a call whose arguments are wrong with one plain sentence each, before the SDK
    validates them (its own answer is pydantic's report).

    An extension's ``intercept_tool_call`` is the SDK's public hook around ``tools/call``: it
    sees each call's name and arguments and may answer without running the tool. The SDK
    advertises every extension under ``capabilities.extensions`` (a field of protocol
    2026-07-28; 2025-11-25 has none), hence the identifier; clients ignore ones they do not know.
    """

    identifier = "io.github.semsearch/plain-argument-errors"

    def __init__(self, tools: Sequence[Tool]) -> None:
        self._tools = {tool.name: tool for tool in tools}

    async def intercept_tool_call(
        self,
        params: CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        """Answer bad arguments; pass a good call (or an unknown tool) on to the SDK."""
        tool = self._tools.get(params.name)
        problems = [] if tool is None else argument_problems(tool, params.arguments or {})
        if problems:
            text = TextContent(type="text", text=" ".join(problems))
            return CallToolResult(content=[text], is_error=True)
        return await call_next(ctx)


def argument_problems(tool: Tool, arguments: Mapping[str, Any]) -> list[str]:
    """One sentence per unknown or bad argument of a call to ``tool``; none when all are good.

    The check is the one the SDK runs before calling the tool (``validate_arguments`` of the
    tool's metadata), on the arguments the tool takes."""
    problems = unknown_arguments(tool.name, tool.parameters, arguments)
    known = {
        name: value
        for name, value in arguments.items()
        if name in tool.parameters.get("properties", {})
    }
    try:
        tool.fn_metadata.validate_arguments(known)
    except ValidationError as exc:
        problems += argument_errors(tool.parameters, exc.errors())
    return problems
