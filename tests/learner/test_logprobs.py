"""What is scored and how: the program/prompt split, and batched log-probs that do not depend on
padding or on skipping the prompt's logits."""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from spade_ray.learner import logprobs
from spade_ray.learner.logprobs import (
    collate,
    encode,
    sequence_logps,
)
from spade_ray.tasks import split_program


def test_the_signature_moves_from_the_prompt_to_the_completion():
    prompt = "### Solution\ndef f(x):\n"
    context, completion = split_program(prompt, "def f(x):\n    return x\n")
    assert context == "### Solution\n"
    assert completion == "def f(x):\n    return x\n"


def test_a_program_that_does_not_continue_the_prompt_is_scored_whole():
    prompt = "Write f.\n"
    assert split_program(prompt, "def f(x):\n    return x\n") == (prompt,
                                                                  "def f(x):\n    return x\n")
    # only the prompt's whole last line, and only a def line, moves: an answer that ends
    # like the prompt's header is not part of it
    predict = "f(3)\n### Output\n"
    for answer in ("put", "tput", "### Output", "Output"):
        assert split_program(predict, answer) == (predict, answer)
    assert split_program("### Fixed\nxdef f(x):\n", "def f(x):\n")[0] == "### Fixed\nxdef f(x):\n"


def _naive_logp(model, prompt_ids, completion_ids):
    ids = torch.tensor([prompt_ids + completion_ids])
    logps = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
    return sum(logps[len(prompt_ids) + t - 1, tok].item() for t, tok in
               enumerate(completion_ids))


def test_batched_logps_equal_one_sequence_at_a_time(tiny_model):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    rows = [encode(tokenizer, p, c, 64) for p, c in
            [("a long prompt here\n", "x = 1\n"), ("p\n", "return a very long completion\n"),
             ("mid prompt\n", "")]]
    total, counts = sequence_logps(model, collate(rows, pad_token_id=0))
    expected = [_naive_logp(model, p, c) for p, c in rows]
    assert torch.allclose(total, torch.tensor(expected), atol=1e-4)
    assert counts.tolist() == [len(c) for _, c in rows]


def test_truncation_keeps_the_prompt_end_and_the_completion_start(tiny_model):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    prompt_ids, completion_ids = encode(tokenizer, "abcdef", "uvwxyz", 8)
    assert tokenizer.decode(prompt_ids) == "ef"
    assert tokenizer.decode(completion_ids) == "uvwxyz"
    prompt_ids, completion_ids = encode(tokenizer, "abcdef", "uvwxyz", 4)
    assert (tokenizer.decode(prompt_ids), tokenizer.decode(completion_ids)) == ("f", "uvw")


def _naive_token_logps(model, batch):
    """The textbook way: all logits, log-softmax, gather, mask."""
    logps = torch.log_softmax(model(input_ids=batch.input_ids,
                                    attention_mask=batch.attention_mask).logits.float(), -1)
    picked = logps[:, :-1].gather(-1, batch.input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return (picked * batch.completion_mask[:, 1:]).sum(dim=1)


def test_chunked_logps_have_the_gradients_of_the_full_logits(tiny_model, monkeypatch):
    # Chunks of 3 positions: several chunks per batch and a partial last one.
    monkeypatch.setattr(logprobs, "CHUNK_POSITIONS", 3)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    batch = collate([encode(tokenizer, p, c, 64) for p, c in
                     [("prompt one\n", "x = 1\n"), ("p\n", "return a longer completion\n")]],
                    pad_token_id=0)
    weights = torch.tensor([0.7, -1.3])
    (sequence_logps(model, batch)[0] * weights).sum().backward()
    ours = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    (_naive_token_logps(model, batch) * weights).sum().backward()
    for name, param in model.named_parameters():
        torch.testing.assert_close(ours[name], param.grad, atol=1e-5, rtol=1e-4, msg=name)


def test_a_special_tokens_spelling_in_model_text_is_characters_not_the_token(tiny_model):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    specials = {tokenizer.eos_token_id, tokenizer.bos_token_id, tokenizer.pad_token_id} - {None}
    prompt_ids, completion_ids = encode(tokenizer, f"Write f.{tokenizer.eos_token}\n",
                                        f"x = '{tokenizer.eos_token}{tokenizer.bos_token}'\n",
                                        256)
    assert not specials & set(completion_ids)
    assert not specials & set(prompt_ids[1:])  # only the tokenizer's own BOS, if it adds one
    assert tokenizer.decode(completion_ids) == f"x = '{tokenizer.eos_token}{tokenizer.bos_token}'\n"
