"""Run by the TARGET env's interpreter for `bench --prompts FILE.jsonl`: chat conversations to
token ids with the target's own tokenizer and chat template.

    python chat_template.py REQUEST.json

REQUEST: {"tokenizer": DIR, "conversations": [[{"role", "content"}, ...], ...], "count": int,
"enable_thinking": bool, "min_prompt_tokens": int or null}. Each of the first ``count``
conversations is rendered with ``apply_chat_template(add_generation_prompt=True,
enable_thinking=...)`` and encoded without added special tokens (the template writes them), as
SGLang's chat endpoint does. With ``min_prompt_tokens`` N, a conversation whose prompt is
shorter gets the last user message of the conversations after it (in file order, wrapping
round, each at most once) appended to its own last user message, blank-line separated, until
its prompt has N tokens or more. Prints one result line: {"prompts": [[ids...], ...]} or
{"error": "why"}.
"""

import json
import sys

RESULT_MARK = "@@DDTREE-OVERLAY-RESULT@@ "
SEPARATOR = "\n\n"


class PromptError(Exception):
    pass


def _with_last_user(conversation, content):
    *head, last = conversation
    return [*head, dict(last, content=content)]


def build_prompts(tokenizer, conversations, *, count, enable_thinking, min_prompt_tokens):
    def encode(conversation):
        text = tokenizer.apply_chat_template(
            conversation, tokenize=False, add_generation_prompt=True, enable_thinking=enable_thinking
        )
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    prompts = []
    for i, conversation in enumerate(conversations[:count]):
        ids = encode(conversation)
        if min_prompt_tokens:
            ids = _lengthened(encode, conversations, i, ids, min_prompt_tokens, tokenizer)
        prompts.append(ids)
    return prompts


def _lengthened(encode, conversations, index, ids, minimum, tokenizer):
    """The conversation's prompt with later conversations' last user messages appended until it
    reaches ``minimum`` tokens; PromptError when all of them together fall short. Pieces are
    counted on their own and the prompt is encoded again only when the count says it is long
    enough (a template's joins can differ by a token or two)."""
    if len(ids) >= minimum:
        return ids
    conversation = conversations[index]
    pieces = []
    estimate = len(ids)

    def joined():
        return encode(_with_last_user(conversation, SEPARATOR.join([conversation[-1]["content"], *pieces])))

    for other in conversations[index + 1 :] + conversations[:index]:
        piece = other[-1]["content"]
        pieces.append(piece)
        estimate += len(tokenizer(SEPARATOR + piece, add_special_tokens=False)["input_ids"])
        if estimate >= minimum:
            ids = joined()
            if len(ids) >= minimum:
                return ids
            estimate = len(ids)
    ids = joined()
    if len(ids) < minimum:
        raise PromptError(
            f"all {len(conversations)} conversations together make a prompt of {len(ids)} tokens, "
            f"fewer than --min-prompt-tokens {minimum}"
        )
    return ids


def main(argv):
    with open(argv[1]) as f:
        request = json.load(f)
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(request["tokenizer"])
        prompts = build_prompts(
            tokenizer,
            request["conversations"],
            count=int(request["count"]),
            enable_thinking=bool(request["enable_thinking"]),
            min_prompt_tokens=request.get("min_prompt_tokens"),
        )
        result = {"prompts": prompts}
    except PromptError as error:
        result = {"error": str(error)}
    except Exception as exc:  # the tokenizer's own failure, reported on one line
        result = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}
    print(RESULT_MARK + json.dumps(result))


if __name__ == "__main__":
    main(sys.argv)
