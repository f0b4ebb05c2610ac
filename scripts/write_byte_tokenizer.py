"""Write the fixture pairs' byte tokenizer and a chat prompt file of their held-out prompts.

    python3 scripts/write_byte_tokenizer.py [--out ddtree_overlay/fixtures]

The fixtures' vocabulary is bytes 0..255 then BOS 256, EOS 257, PAD 258, MASK 259
(fixtures/README.md); they ship no tokenizer, since the engines get token ids. `bench --prompts
FILE.jsonl` renders chat prompts with a tokenizer's chat template, so this writes one for that
vocabulary (standard library only):

    byte_tokenizer/tokenizer.json         a byte-level BPE without merges: one token per byte,
                                          ids equal to byte values, the four specials after them
    byte_tokenizer/tokenizer_config.json  PreTrainedTokenizerFast, and a chat template that
                                          writes each turn as a Python comment header and its
                                          text (the pairs were trained on Python sources)
    chat_prompts.jsonl                    {"turns": [text]} per held-out prompt of the dense pair
                                          (the hybrid pair's are the same), BOS dropped: the
                                          template writes it
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SPECIALS = {256: "<|bos|>", 257: "<|eos|>", 258: "<|pad|>", 259: "<|mask|>"}
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}# {{ message['role'] }}:\n{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}# assistant:\n"
    "{% if enable_thinking is defined and not enable_thinking %}# (no thinking)\n{% endif %}"
    "{% endif %}"
)
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: printable bytes as themselves, the rest shifted past 255."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, shift = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[byte] = chr(byte)
        else:
            chars[byte] = chr(256 + shift)
            shift += 1
    return chars


def tokenizer_json() -> dict:
    vocab = {char: byte for byte, char in bytes_to_unicode().items()}
    added = [
        {"id": i, "content": text, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for i, text in SPECIALS.items()
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": BYTE_LEVEL,
        "post_processor": None,
        "decoder": BYTE_LEVEL,
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
            "vocab": vocab, "merges": [],
        },
    }


def tokenizer_config() -> dict:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": SPECIALS[256],
        "eos_token": SPECIALS[257],
        "pad_token": SPECIALS[258],
        "model_max_length": 2048,
        "chat_template": CHAT_TEMPLATE,
    }


def chat_lines(heldout: list[list[int]]) -> list[str]:
    """One {"turns": [text]} line per held-out prompt whose bytes are UTF-8 text."""
    lines = []
    for prompt in heldout:
        try:
            text = bytes(prompt[1:]).decode("utf-8")
        except (UnicodeDecodeError, ValueError):
            continue
        lines.append(json.dumps({"turns": [text]}))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "ddtree_overlay" / "fixtures")
    args = parser.parse_args()
    directory = args.out / "byte_tokenizer"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tokenizer.json").write_text(json.dumps(tokenizer_json(), indent=1, ensure_ascii=False) + "\n")
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(), indent=1) + "\n")
    heldout = json.loads((args.out / "heldout_prompts.json").read_text())
    (args.out / "chat_prompts.jsonl").write_text("\n".join(chat_lines(heldout)) + "\n")


if __name__ == "__main__":
    main()
