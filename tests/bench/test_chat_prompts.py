"""bench.chat_prompts and in_target/chat_template.py: chat prompt files read, checked and turned
into token ids by a tokenizer's chat template (a stand-in tokenizer: one id per character)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from ddtree_overlay.bench import chat_prompts
from ddtree_overlay.bench.chat_prompts import ChatPrompts
from ddtree_overlay.engine.errors import BadPromptFile, ExitCode
from ddtree_overlay.in_target import chat_template

FAKE_TRANSFORMERS = '''
class _Tokenizer:
    def apply_chat_template(self, conversation, tokenize, add_generation_prompt, enable_thinking):
        assert tokenize is False
        text = "".join(f"<{m['role']}>{m['content']}" for m in conversation)
        return text + ("<assistant>" if add_generation_prompt else "") + ("" if enable_thinking else "<nothink>")

    def __call__(self, text, add_special_tokens):
        assert add_special_tokens is False
        return {"input_ids": [ord(c) for c in text]}


class AutoTokenizer:
    @staticmethod
    def from_pretrained(path):
        if not path.endswith("tok"):
            raise OSError(f"Can't load tokenizer for '{path}'")
        return _Tokenizer()
'''


def write_lines(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


def tokenizer_dir(tmp_path: Path, template: bool = True) -> Path:
    directory = tmp_path / "tok"
    directory.mkdir()
    (directory / "tokenizer.json").write_text("{}")
    (directory / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ x }}"} if template else {}))
    return directory


def test_turns_lines_are_their_first_user_turn_and_messages_lines_are_sent_whole(tmp_path: Path) -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    path = write_lines(tmp_path / "p.jsonl", [{"turns": ["one", "two"]}, "", {"messages": messages}])
    assert chat_prompts.is_chat_file(path)
    assert chat_prompts.read_conversations(path) == [[{"role": "user", "content": "one"}], messages]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([], "it holds no conversation"),
        (["{not json"], "line 1 is not JSON"),
        ([{"turns": ["ok"]}, {"prompt": "x"}], "line 2 has neither `turns` nor `messages`"),
        ([{"turns": []}], "line 1: `turns` must be a list of non-empty strings"),
        ([{"turns": ["", "x"]}], "line 1: `turns` must be a list of non-empty strings"),
        ([{"messages": [{"role": "robot", "content": "x"}]}], "line 1: every message needs a `role`"),
        ([{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}],
         "line 1: the last message must be a non-empty user message"),
    ],
)
def test_a_bad_line_is_named_with_exit_14(tmp_path: Path, rows: list[Any], message: str) -> None:
    path = write_lines(tmp_path / "p.jsonl", rows) if rows else tmp_path / "p.jsonl"
    if not rows:
        path.write_text("\n\n")
    with pytest.raises(BadPromptFile, match=message) as raised:
        chat_prompts.read_conversations(path)
    assert raised.value.exit_code == ExitCode.BAD_PROMPT_FILE


def test_a_token_id_list_is_not_a_chat_file(tmp_path: Path) -> None:
    path = tmp_path / "ids.json"
    path.write_text(" [[1, 2]]")
    assert not chat_prompts.is_chat_file(path)


def test_chat_prompts_need_tokenizer_files_and_a_chat_template(tmp_path: Path) -> None:
    with pytest.raises(BadPromptFile, match="is not a directory"):
        chat_prompts.check_tokenizer(tmp_path / "missing")
    with pytest.raises(BadPromptFile, match=r"has no tokenizer \(tokenizer.json"):
        chat_prompts.check_tokenizer(tmp_path)
    with pytest.raises(BadPromptFile, match="has no chat template"):
        chat_prompts.check_tokenizer(tokenizer_dir(tmp_path, template=False))
    (tmp_path / "tok" / "chat_template.jinja").write_text("{{ x }}")
    chat_prompts.check_tokenizer(tmp_path / "tok")


class CharTokenizer:
    """One id per character; the template as FAKE_TRANSFORMERS writes it."""

    def __init__(self) -> None:
        self.thinking: list[bool] = []

    def apply_chat_template(self, conversation, tokenize, add_generation_prompt, enable_thinking):
        self.thinking.append(enable_thinking)
        return "".join(f"<{m['role']}>{m['content']}" for m in conversation) + "<assistant>"

    def __call__(self, text, add_special_tokens):
        return {"input_ids": [ord(c) for c in text]}


def test_prompts_are_rendered_with_enable_thinking_as_asked() -> None:
    tokenizer = CharTokenizer()
    conversations = [[{"role": "user", "content": "ab"}], [{"role": "user", "content": "c"}]]
    prompts = chat_template.build_prompts(
        tokenizer, conversations, count=1, enable_thinking=True, min_prompt_tokens=None
    )
    assert prompts == [[ord(c) for c in "<user>ab<assistant>"]] and tokenizer.thinking == [True]


def test_a_short_prompt_takes_the_next_conversations_turns_until_it_is_long_enough() -> None:
    conversations = [[{"role": "user", "content": text}] for text in ("aaaa", "bbbb", "cccc")]
    base = len("<user><assistant>")
    prompts = chat_template.build_prompts(
        CharTokenizer(), conversations, count=3, enable_thinking=False, min_prompt_tokens=base + 11
    )
    texts = ["".join(map(chr, ids)) for ids in prompts]
    assert texts == [
        "<user>aaaa\n\nbbbb\n\ncccc<assistant>",
        "<user>bbbb\n\ncccc\n\naaaa<assistant>",  # wraps round to the file's start
        "<user>cccc\n\naaaa\n\nbbbb<assistant>",
    ]
    with pytest.raises(chat_template.PromptError, match="make a prompt of 33 tokens, fewer than --min-prompt-tokens 40"):
        chat_template.build_prompts(CharTokenizer(), conversations, count=1, enable_thinking=False, min_prompt_tokens=40)


def test_tokenize_runs_the_template_in_the_target_interpreter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "site"
    (fake / "transformers").mkdir(parents=True)
    (fake / "transformers" / "__init__.py").write_text(FAKE_TRANSFORMERS)
    monkeypatch.setenv("PYTHONPATH", str(fake))
    path = write_lines(tmp_path / "p.jsonl", [{"turns": ["hi"]}, {"turns": ["yo"]}])
    ids = chat_prompts.tokenize(Path(sys.executable), ChatPrompts(path, tokenizer_dir(tmp_path)), count=2)
    assert ["".join(map(chr, p)) for p in ids] == ["<user>hi<assistant><nothink>", "<user>yo<assistant><nothink>"]
    other = tmp_path / "other"
    other.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (other / name).write_text((tmp_path / "tok" / name).read_text())
    with pytest.raises(BadPromptFile, match=r"could not be tokenized .*: OSError: Can't load tokenizer"):
        chat_prompts.tokenize(Path(sys.executable), ChatPrompts(path, other), count=2)
