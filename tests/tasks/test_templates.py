import pytest
from transformers import AutoTokenizer

from spade_ray.tasks.templates import load_prompts, render

EXAMPLE = {"description": "Add two numbers.", "solution": "def add(a, b):\n    return a + b"}


def test_fewshot_solver_prompt_ends_at_the_signature():
    solver = load_prompts("fewshot")["solver"]
    text = render(solver, [EXAMPLE], description="Square x.", signature="def sq(x):")
    assert text.count("### Task") == 2
    assert text.rstrip().endswith("def sq(x):")


def test_chat_prompt_uses_the_models_chat_template(tiny_model):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    tokenizer.chat_template = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}"
                               "{% endfor %}<|assistant|>")
    solver = load_prompts("chat")["solver"]
    text = render(solver, [], tokenizer, description="Square x.", signature="def sq(x):")
    assert text.startswith("<|system|>You are an expert") and text.endswith("<|assistant|>")


def test_missing_variable_is_named():
    with pytest.raises(ValueError, match="'signature'"):
        render(load_prompts("fewshot")["solver"], [], description="x")


def test_unknown_variant_is_named():
    with pytest.raises(ValueError, match="'zeroshot'"):
        load_prompts("zeroshot")
