import pytest
from transformers import AutoTokenizer

from spade_ray.tasks.templates import load_prompts, render

EXAMPLE = {"description": "Add two numbers.", "shown": "Examples:\nadd(1, 2) == 3",
           "solution": "def add(a, b):\n    return a + b"}


def test_fewshot_solver_prompt_ends_at_the_signature():
    solver = load_prompts("fewshot")["codegen"]
    text = render(solver, [EXAMPLE], description="Square x.", shown="", signature="def sq(x):")
    assert text.count("### Task") == 2
    assert text.rstrip().endswith("def sq(x):")


def test_chat_prompt_uses_the_models_chat_template(tiny_model):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    tokenizer.chat_template = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}"
                               "{% endfor %}<|assistant|>")
    solver = load_prompts("chat")["codegen"]
    text = render(solver, [], tokenizer, description="Square x.", shown="",
                  signature="def sq(x):")
    assert text.startswith("<|system|>You are an expert") and text.endswith("<|assistant|>")


def test_missing_variable_is_named():
    with pytest.raises(ValueError, match="'signature'"):
        render(load_prompts("fewshot")["codegen"], [], description="x", shown="")


def test_unknown_variant_is_named():
    with pytest.raises(ValueError, match="'zeroshot'"):
        load_prompts("zeroshot")


@pytest.mark.parametrize("variant", ["fewshot", "chat"])
def test_every_variant_has_a_generator_and_a_prompt_per_family(variant):
    from spade_ray.records import TaskFamily

    assert set(load_prompts(variant)) == {"generator", *TaskFamily}
