"""The facts of one server answer that judging reads: its text, why it stopped, how many tokens it says."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Answer:
    """What the server answered over HTTP for one request: the text, why it stopped, how many tokens it says."""

    text: str | None
    finish_reason: str | None
    completion_tokens: int | None
    problems: tuple[str, ...] = ()  # what the answer lacks (each a reason: an answer must say all three)
    spec_decode_ran: bool | None = None  # usage.spec_decode_ran where the build reports it (newer builds)

    def same_words(self, other: Answer) -> bool:
        return (self.text, self.finish_reason) == (other.text, other.finish_reason)


def read_answer(response: object) -> Answer:
    """The three facts of an OpenAI-style chat completion (the real server's shape), each checked for type."""
    problems = []
    choices = response.get("choices") if isinstance(response, dict) else None
    choice = choices[0] if isinstance(choices, list) and len(choices) == 1 else None
    message = choice.get("message") if isinstance(choice, dict) else None
    text = message.get("content") if isinstance(message, dict) else None
    reason = choice.get("finish_reason") if isinstance(choice, dict) else None
    usage = response.get("usage") if isinstance(response, dict) else None
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if not isinstance(text, str):
        problems.append("no choices[0].message.content text (exactly one choice expected)")
        text = None
    if not isinstance(reason, str):
        problems.append("no choices[0].finish_reason")
        reason = None
    if not isinstance(tokens, int) or isinstance(tokens, bool):
        problems.append("no integer usage.completion_tokens")
        tokens = None
    ran = usage.get("spec_decode_ran") if isinstance(usage, dict) else None
    if ran is not None and not isinstance(ran, bool):
        problems.append(f"a usage.spec_decode_ran that is not true or false ({str(ran)[:40]!r})")
        ran = None
    return Answer(text, reason, tokens, tuple(f"the server's answer has {p}" for p in problems), ran)
