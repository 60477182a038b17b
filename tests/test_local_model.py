"""The tiny model and word-level tokenizer: vocabulary, phrases, chat template, HF round trip."""

import pytest

torch = pytest.importorskip("torch")

from vpo.generate import load_pretrained  # noqa: E402
from vpo.local.model import (
    TAG_PATTERN,
    build_model,
    build_tokenizer,  # noqa: E402
    frequent_phrases,
)
from vpo.backend import save_pretrained_atomic  # noqa: E402
from vpo.tiny_llama import TinyModelSettings  # noqa: E402

PROMPTS = [
    f"Navigate a 9x9 maze from S to E.\nS . # G\n- You have {n} steps.\n"
    "Write your moves inside <answer></answer> tags, for example <answer>UP UP RIGHT</answer>."
    for n in (12, 23, 7)
]
DEMOS = ["<answer>UP DOWN LEFT RIGHT</answer>", "<route_1>UP</route_1>\n<route_2>DOWN RIGHT</route_2>"]


def make_tokenizer():
    words = {w for d in DEMOS for w in TAG_PATTERN.sub(" ", d).split()}
    return build_tokenizer(PROMPTS + DEMOS, phrases=frequent_phrases(PROMPTS, words))


def test_phrases_keep_moves_and_numbers_apart():
    words = {w for d in DEMOS for w in TAG_PATTERN.sub(" ", d).split()}
    phrases = frequent_phrases(PROMPTS, words)
    assert "Write your moves inside" in phrases
    assert "tags, for example" in phrases
    assert "maze from S to E." in phrases
    # The format example is made of response words only: it must stay one token per move.
    assert not any(p.strip() == "UP UP RIGHT" for p in phrases)
    assert not any(ch.isdigit() for p in phrases for ch in p)


def test_tokenizer_tags_digits_and_unknown_words():
    tok = make_tokenizer()
    ids = tok("<route_2> UP RIGHT </route_2> 0.35 zebra", add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == ["<route_2>", "UP", "RIGHT", "</route_2>", "0", ".", "3", "5", "<unk>"]
    # Moves glued to tags (the maze demonstration format) split the same way.
    ids = tok("<answer>UP DOWN</answer>", add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == ["<answer>", "UP", "DOWN", "</answer>"]
    assert tok.decode(ids) == "<answer> UP DOWN </answer>"


def test_chat_template_renders_user_turn_and_generation_prompt():
    tok = make_tokenizer()
    text = tok.apply_chat_template([{"role": "user", "content": "S . #"}], add_generation_prompt=True, tokenize=False)
    assert text == "<|user|> S . # <|assistant|> "
    assert tok.convert_ids_to_tokens(tok(text, add_special_tokens=False)["input_ids"]) == [
        "<|user|>",
        "S",
        ".",
        "#",
        "<|assistant|>",
    ]


def test_save_load_round_trip_gives_identical_logits(tmp_path):
    """transformers' model -> files -> vpo.tiny_llama (no transformers model code) -> files -> transformers:
    the same parameters at every stage and the same logits at the end."""
    from transformers import AutoModelForCausalLM

    from vpo.tiny_llama import TinyLlama

    tok = make_tokenizer()
    settings = TinyModelSettings(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_positions=64)
    model = build_model(
        len(tok),
        settings,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        seed=3,
    )
    out = save_pretrained_atomic(model, tok, tmp_path / "m")
    assert not list(tmp_path.glob("*.tmp-*"))
    loaded, tok2 = load_pretrained(out)
    assert isinstance(loaded, TinyLlama)
    assert loaded.state_dict().keys() == model.state_dict().keys()
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in model.state_dict().items())
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight  # tied, as in transformers' model
    assert tok2.get_vocab() == tok.get_vocab()
    assert tok2.padding_side == "left"
    assert loaded.config.hidden_size == 32 and loaded.config.max_position_embeddings == 64

    again = save_pretrained_atomic(loaded, tok2, tmp_path / "again")
    reread = AutoModelForCausalLM.from_pretrained(again)
    ids = torch.tensor([tok("S . # UP", add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, reread(ids).logits)
    assert reread.generation_config.eos_token_id == tok.eos_token_id


def test_a_model_the_plain_torch_code_does_not_compute_is_loaded_by_transformers(tmp_path):
    import json

    tok = make_tokenizer()
    settings = TinyModelSettings(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_positions=64)
    model = build_model(len(tok), settings, pad_token_id=0, bos_token_id=1, eos_token_id=2, seed=3)
    out = save_pretrained_atomic(model, tok, tmp_path / "m")
    config = json.loads((out / "config.json").read_text())
    config["rope_parameters"] = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    (out / "config.json").write_text(json.dumps(config))
    loaded, _ = load_pretrained(out)
    assert type(loaded).__name__ == "LlamaForCausalLM"


def test_same_seed_same_weights_and_clear_error_for_missing_dir(tmp_path):
    tok = make_tokenizer()
    settings = TinyModelSettings(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
    a, b = (build_model(len(tok), settings, pad_token_id=0, bos_token_id=1, eos_token_id=2, seed=5) for _ in range(2))
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    with pytest.raises(FileNotFoundError, match="vpo base-model"):
        load_pretrained(tmp_path / "nothing")


def test_the_light_tokenizer_gives_what_transformers_gives(tmp_path):
    """vpo.tiny_llama.TinyTokenizer (tokenizers alone) against transformers' fast tokenizer on the same files:
    encodings, decodings with and without special tokens, the chat template, the special ids, a save."""
    from transformers import PreTrainedTokenizerFast

    from vpo.tiny_llama import TinyTokenizer

    tok = make_tokenizer()
    model = build_model(
        len(tok),
        TinyModelSettings(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_positions=64),
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    out = save_pretrained_atomic(model, tok, tmp_path / "m")
    light, full = TinyTokenizer(out), PreTrainedTokenizerFast.from_pretrained(out)
    texts = PROMPTS + DEMOS + ["<route_2> UP zebra 0.35 </route_2></s>", "", "  spaced   out  "]
    for text in texts:
        assert light(text)["input_ids"] == full(text, add_special_tokens=False)["input_ids"]
    rng = torch.Generator().manual_seed(0)
    for _ in range(50):
        ids = torch.randint(0, len(tok), (int(torch.randint(0, 30, (1,), generator=rng)),), generator=rng).tolist()
        for skip in (True, False):
            assert light.decode(ids, skip_special_tokens=skip) == full.decode(ids, skip_special_tokens=skip)
    conversations = [[{"role": "user", "content": p}] for p in PROMPTS] + [
        [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "S . #"},
            {"role": "assistant", "content": "<answer>UP</answer>"},
            {"role": "user", "content": "again"},
        ]
    ]
    for conversation in conversations:
        for generation_prompt in (True, False):
            assert light.apply_chat_template(
                conversation, add_generation_prompt=generation_prompt, tokenize=False, enable_thinking=False
            ) == full.apply_chat_template(
                conversation, add_generation_prompt=generation_prompt, tokenize=False, enable_thinking=False
            )
    assert (light.pad_token_id, light.bos_token_id, light.eos_token_id) == (
        full.pad_token_id,
        full.bos_token_id,
        full.eos_token_id,
    )
    assert len(light) == len(full) and light.get_vocab() == full.get_vocab()
    (tmp_path / "copy").mkdir()
    light.save_pretrained(tmp_path / "copy")
    assert PreTrainedTokenizerFast.from_pretrained(tmp_path / "copy").get_vocab() == full.get_vocab()
