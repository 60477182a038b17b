"""The tiny causal LM and word-level tokenizer of the embedded CPU backend.

Both are built with transformers for one task's text and saved in Hugging Face format, so any reader
loads them like a hub model; the project's own jobs load them without transformers (vpo/tiny_llama.py).
The tokenizer is word level: every grid symbol, move and tag is one token, which keeps sequences
short enough for a model of a few hundred thousand parameters to learn the output format.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Iterable, Sequence

# CHAT_TEMPLATE is rendered by `tokenizer.apply_chat_template(messages, add_generation_prompt=True)`
from vpo.tiny_llama import CHAT_TEMPLATE, TinyModelSettings

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
USER, ASSISTANT = "<|user|>", "<|assistant|>"
# XML-like tags (`<answer>`, `</route_2>`) stay whole tokens instead of splitting on `<`, `/`, `>`.
TAG_PATTERN = re.compile(r"</?[A-Za-z_]+(?:_\d+)?>")
_CUT_PATTERN = re.compile(r"(?:</?[A-Za-z_]+(?:_\d+)?>|\d+)")


def frequent_phrases(
    prompts: Sequence[str], response_words: set[str], *, min_share: float = 0.2, min_words: int = 3
) -> list[str]:
    """Fixed instruction fragments shared by many prompts, to become single tokens.

    Each line is cut at numbers and tags; a fragment of at least `min_words` words that occurs in
    at least `min_share` of the prompts is a phrase, unless all its words can occur in responses
    (a format example such as "UP UP RIGHT" must not swallow the moves the model writes), or it
    has no word of three letters (grid rows stay one token per cell).
    Like a BPE merge of frequent spans, this shortens the constant boilerplate of a task prompt to
    a few tokens, so the tiny model spends its compute on the part that varies (the grid).
    """
    from tokenizers import pre_tokenizers

    pre = pre_tokenizers.Whitespace()
    seen: Counter[str] = Counter()
    for text in prompts:
        fragments = set()
        for line in text.splitlines():
            for piece in _CUT_PATTERN.split(line):
                piece = piece.strip()
                words = [w for w, _ in pre.pre_tokenize_str(piece)]
                if (
                    len(words) >= min_words
                    and not set(words) <= response_words
                    and any(len(w) >= 3 and w.isalpha() for w in words)
                ):
                    fragments.add(piece)
        seen.update(fragments)
    threshold = max(2, min_share * len(prompts))
    # Longest first, so a phrase containing another one wins the leftmost-longest match.
    return sorted((p for p, c in seen.items() if c >= threshold), key=lambda p: (-len(p), p))


def build_tokenizer(
    corpus: Iterable[str], *, min_count: int = 1, extra_tokens: Iterable[str] = (), phrases: Sequence[str] = ()
):
    """A word-level `PreTrainedTokenizerFast` whose vocabulary is every word of `corpus`.

    Words are whitespace/punctuation-split and digits are single tokens, so numbers such as goal
    weights ("0.35") need only ten digit tokens. Tags matching `<name>` / `</name_3>` and the given
    `phrases` (see `frequent_phrases`) are added tokens (never split). Unknown words map to `<unk>`.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    pre = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True)])
    tags: set[str] = set(extra_tokens) | {USER, ASSISTANT}
    counts: Counter[str] = Counter()
    for text in corpus:
        tags.update(TAG_PATTERN.findall(text))
        for piece in TAG_PATTERN.split(text):
            counts.update(word for word, _ in pre.pre_tokenize_str(piece))
    specials = [PAD, BOS, EOS, UNK]
    counts.update({str(d): min_count for d in range(10)})  # every number is spellable
    words = sorted(w for w, c in counts.items() if c >= min_count and w not in tags and w not in specials)
    vocab = {tok: i for i, tok in enumerate(specials + words)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tokenizer.pre_tokenizer = pre
    # WordPiece's decoder joins tokens with single spaces, which is how the text was split.
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tokenizer.add_tokens([AddedToken(t, single_word=False, normalized=False) for t in sorted(tags)])
    tokenizer.add_tokens([AddedToken(p, single_word=False, normalized=False) for p in phrases])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        padding_side="left",
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model(
    vocab_size: int,
    settings: TinyModelSettings,
    *,
    pad_token_id: int,
    bos_token_id: int,
    eos_token_id: int,
    seed: int = 0,
):
    """A randomly initialised `LlamaForCausalLM` of the given size (deterministic for a seed)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=settings.hidden_size,
        intermediate_size=settings.intermediate_size,
        num_hidden_layers=settings.num_layers,
        num_attention_heads=settings.num_heads,
        num_key_value_heads=settings.num_heads,
        max_position_embeddings=settings.max_positions,
        pad_token_id=pad_token_id,
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = pad_token_id
    model.generation_config.eos_token_id = eos_token_id
    model.generation_config.bos_token_id = bos_token_id
    return model


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())
