"""Chat prompt files for `bench --prompts FILE`: conversations read here, turned into token ids
by the target's own tokenizer and chat template in the target env (`in_target/chat_template.py`).

A prompt file is either a JSON list of token-id lists (used as they are) or JSON lines, one
conversation per line:

    {"turns": ["user message", "next user message", ...]}      the DDTree reference's datasets
    {"messages": [{"role": "system" | "user" | "assistant", "content": "..."}, ...]}

A ``turns`` line is its first user turn: the reference answers each turn before it sends the
next, and a bench decodes every prompt in one go, so it has no answer to put between them. A
``messages`` line is sent as it is and must end with a user message. Blank lines are skipped.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddtree_overlay.engine.errors import chat_prompts_failed, no_chat_tokenizer, prompt_file_invalid
from ddtree_overlay.engine.target import run_script

Conversation = list[dict[str, str]]
ROLES = ("system", "user", "assistant")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
TOKENIZE_TIMEOUT_S = 600


@dataclass(frozen=True)
class ChatPrompts:
    """How a chat prompt file becomes the bench's prompts."""

    path: Path
    tokenizer: Path  # the target's directory unless --tokenizer says otherwise
    enable_thinking: bool = False  # the DDTree reference renders with thinking off
    min_prompt_tokens: int | None = None


def is_chat_file(path: Path) -> bool:
    """JSON lines of conversations (first character `{`), not a JSON list of token ids."""
    try:
        with path.open(encoding="utf-8") as f:
            head = f.read(4096).lstrip()
    except (OSError, UnicodeDecodeError):
        return False
    return head.startswith("{")


def read_conversations(path: Path) -> list[Conversation]:
    """Every line's conversation, in file order; `BadPromptFile` names the first bad line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise prompt_file_invalid(path, f"cannot read it ({error})") from None
    conversations = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as error:
            raise prompt_file_invalid(path, f"line {number} is not JSON ({error})") from None
        conversations.append(_conversation(path, number, row))
    if not conversations:
        raise prompt_file_invalid(path, "it holds no conversation")
    return conversations


def _conversation(path: Path, number: int, row: Any) -> Conversation:
    where = f"line {number}"
    if isinstance(row, Mapping) and "turns" in row:
        turns = row["turns"]
        if not (isinstance(turns, list) and turns and all(isinstance(t, str) and t.strip() for t in turns)):
            raise prompt_file_invalid(path, f"{where}: `turns` must be a list of non-empty strings")
        return [{"role": "user", "content": turns[0]}]
    if isinstance(row, Mapping) and "messages" in row:
        messages = row["messages"]
        if not (isinstance(messages, list) and messages):
            raise prompt_file_invalid(path, f"{where}: `messages` must be a non-empty list")
        for message in messages:
            if not (
                isinstance(message, Mapping)
                and message.get("role") in ROLES
                and isinstance(message.get("content"), str)
            ):
                raise prompt_file_invalid(
                    path, f"{where}: every message needs a `role` ({', '.join(ROLES)}) and a string `content`"
                )
        if messages[-1]["role"] != "user" or not messages[-1]["content"].strip():
            raise prompt_file_invalid(path, f"{where}: the last message must be a non-empty user message")
        return [{"role": m["role"], "content": m["content"]} for m in messages]
    raise prompt_file_invalid(path, f"{where} has neither `turns` nor `messages`")


def check_tokenizer(tokenizer: Path) -> None:
    """`BadPromptFile` unless ``tokenizer`` holds tokenizer files and a chat template."""
    if not tokenizer.is_dir():
        raise no_chat_tokenizer(tokenizer, "is not a directory")
    if not any((tokenizer / name).is_file() for name in TOKENIZER_FILES):
        raise no_chat_tokenizer(tokenizer, f"has no tokenizer ({', '.join(TOKENIZER_FILES)})")
    if not _has_chat_template(tokenizer):
        raise no_chat_tokenizer(tokenizer, "has no chat template")


def _has_chat_template(tokenizer: Path) -> bool:
    if (tokenizer / "chat_template.jinja").is_file() or (tokenizer / "chat_template.json").is_file():
        return True
    try:
        config = json.loads((tokenizer / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, Mapping) and bool(config.get("chat_template"))


def tokenize(python: Path, chat: ChatPrompts, count: int) -> list[list[int]]:
    """The first ``count`` prompts of the file as token ids, made in ``python`` (the target env)."""
    check_tokenizer(chat.tokenizer)
    conversations = read_conversations(chat.path)
    request = {
        "tokenizer": str(chat.tokenizer),
        "conversations": conversations,
        "count": count,
        "enable_thinking": chat.enable_thinking,
        "min_prompt_tokens": chat.min_prompt_tokens,
    }
    with tempfile.TemporaryDirectory(prefix="ddtree-chat-") as scratch:
        request_path = Path(scratch) / "request.json"
        request_path.write_text(json.dumps(request))
        done = run_script(python, "chat_template", [request_path], timeout=TOKENIZE_TIMEOUT_S, isolated=False)
    if done.problem is not None:
        raise chat_prompts_failed(chat.path, python, done.problem)
    if done.result.get("error"):
        raise chat_prompts_failed(chat.path, python, done.result["error"])
    return [list(ids) for ids in done.result["prompts"]]


def describe(chat: ChatPrompts, prompts: Sequence[Sequence[int]]) -> str:
    """The prompts' source and lengths, for the report's setting line."""
    lengths = sorted(len(p) for p in prompts)
    text = (
        f"{len(prompts)} chat prompts from `{chat.path}`, chat template of `{chat.tokenizer}` "
        f"(enable_thinking={chat.enable_thinking}), {lengths[0]}-{lengths[-1]} tokens "
        f"(median {statistics.median(lengths):g})"
    )
    if chat.min_prompt_tokens:
        text += (
            f", each lengthened to {chat.min_prompt_tokens} tokens or more with the next "
            "conversations' last user turns"
        )
    return text
