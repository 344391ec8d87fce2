"""ACP elicitation (an agent asks for structured input, a form) as tailagent's questions.

Each field of the form becomes one question, answered like any other (CLI, A2A, the
desk): its choices are the field's enum, yes/no for a boolean, several at once for
a multi-select. The answers, text, are turned back into the schema's types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from acp.schema import (
    ElicitationBooleanPropertySchema,
    ElicitationIntegerPropertySchema,
    ElicitationMultiSelectPropertySchema,
    ElicitationNumberPropertySchema,
    ElicitationSchema,
    ElicitationStringPropertySchema,
    TitledMultiSelectItems,
)

from tailagent.agents.events import Question, QuestionOption

YES = ("yes", "y", "true", "on", "1")
NO = ("no", "n", "false", "off", "0")


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    schema: Any
    question: Question


def _choices(schema: Any) -> list[tuple[str, str, str]]:
    """(value, label, description) of each choice a field offers; none: free text."""
    if isinstance(schema, ElicitationBooleanPropertySchema):
        return [("true", "yes", ""), ("false", "no", "")]
    if isinstance(schema, ElicitationStringPropertySchema):
        if schema.one_of:
            return [(o.const, o.title, o.description or "") for o in schema.one_of]
        return [(v, v, "") for v in schema.enum or []]
    if isinstance(schema, ElicitationMultiSelectPropertySchema):
        items = schema.items
        if isinstance(items, TitledMultiSelectItems):
            return [(o.const, o.title, o.description or "") for o in items.any_of]
        return [(v, v, "") for v in getattr(items, "enum", None) or []]
    return []


def form_fields(message: str, schema: ElicitationSchema) -> list[Field]:
    """One question per field. A form of one field asks the agent's message itself;
    a larger one names each field (the message is shown before it)."""
    properties = schema.properties or {}
    fields: list[Field] = []
    seen: set[str] = set()
    for name, prop in properties.items():
        label = getattr(prop, "title", None) or name
        description = getattr(prop, "description", None) or ""
        text = message if len(properties) == 1 and message else label
        if len(properties) > 1 and description:
            text = f"{label}: {description}"
        if text in seen:
            text = name
        seen.add(text)
        options = tuple(QuestionOption(label, desc) for _, label, desc in _choices(prop))
        multi = isinstance(prop, ElicitationMultiSelectPropertySchema)
        fields.append(Field(name, prop, Question(text, label, options, multi)))
    return fields


def _choice(field: Field, text: str) -> str:
    """The value of the choice `text` names (its label, any case, or its value); a
    field with choices takes nothing else: ValueError, so the question is asked again,
    rather than anything a caller types reaching the agent as if it were offered."""
    choices = _choices(field.schema)
    for value, label, _ in choices:
        if text.lower() == label.lower() or text == value:
            return value
    labels = ", ".join(label for _, label, _ in choices)
    raise ValueError(f"{field.name}: {text!r} is not one of {labels}")


def _value(field: Field, text: str) -> Any:
    """The answer in the field's type; ValueError when it is not one."""
    schema, text = field.schema, text.strip()
    if isinstance(schema, ElicitationBooleanPropertySchema):
        if text.lower() in YES:
            return True
        if text.lower() in NO:
            return False
        raise ValueError(f"{field.name}: {text!r} is not yes or no")
    if isinstance(schema, ElicitationIntegerPropertySchema | ElicitationNumberPropertySchema):
        kind = int if isinstance(schema, ElicitationIntegerPropertySchema) else float
        try:
            return kind(text)
        except ValueError:
            raise ValueError(f"{field.name}: {text!r} is not a number") from None
    offered = bool(_choices(schema))
    if isinstance(schema, ElicitationMultiSelectPropertySchema):
        picked = [part.strip() for part in text.split(",") if part.strip()]
        return [_choice(field, part) for part in picked] if offered else picked
    return _choice(field, text) if offered else text


def content_of(fields: list[Field], answers: dict[str, str]) -> dict[str, Any]:
    """The form's content from the answers (keyed by question), in the schema's types.
    A field left unanswered is left out; one answered in the wrong type raises
    ValueError, saying which."""
    content: dict[str, Any] = {}
    for field in fields:
        text = answers.get(field.question.question)
        if text is not None and text.strip():
            content[field.name] = _value(field, text)
    return content
