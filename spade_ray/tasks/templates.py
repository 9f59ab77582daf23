"""Prompt templates from conf/prompts/<variant>.yaml, rendered for a base or a chat model.

`fewshot` is for base models (the default Gemma has no chat template): a document the model
continues. `chat` goes through the model's own chat template when it has one (hf, vllm), or is
sent as messages by the openai backend.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

CONF_DIR = Path(__file__).resolve().parents[2] / "conf" / "prompts"


@dataclasses.dataclass(frozen=True)
class PromptTemplate:
    user: str  # str.format template
    example: str  # one few-shot example, joined into {examples}
    chat: bool = False
    system: str | None = None


def load_prompts(variant: str, conf_dir: Path = CONF_DIR) -> dict[str, PromptTemplate]:
    path = conf_dir / f"{variant}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in conf_dir.glob("*.yaml"))
        raise ValueError(f"unknown prompt variant {variant!r}: choose one of {known}")
    data = yaml.safe_load(path.read_text())
    try:
        return {role: PromptTemplate(**fields) for role, fields in data.items()}
    except TypeError as e:
        raise ValueError(f"{path}: {e}") from e


def render(template: PromptTemplate, examples: list[dict[str, Any]], tokenizer: Any = None,
           **variables: Any) -> str:
    """The prompt text. `examples` fill {examples} (few-shot); `tokenizer`, if it has a chat
    template, renders chat prompts the way the model was trained on. Such a prompt holds the
    template's special tokens as text: the hf and vllm backends keep every special token's
    spelling in a prompt as characters (model text must never become a control token), so
    they take plain prompts; the openai backend's server applies its own template."""
    shots = "".join(_fill(template.example, e, "example") for e in examples)
    text = _fill(template.user, {**variables, "examples": shots}, "prompt")
    if not template.chat:
        return text
    messages = ([{"role": "system", "content": template.system}] if template.system else [])
    messages.append({"role": "user", "content": text})
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return "\n\n".join(m["content"] for m in messages)


def _fill(template: str, variables: dict[str, Any], what: str) -> str:
    try:
        return template.format(**variables)
    except KeyError as e:
        raise ValueError(f"{what} template needs {e.args[0]!r}; given {sorted(variables)}") \
            from None
