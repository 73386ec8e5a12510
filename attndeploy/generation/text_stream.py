"""One sequence's text as its tokens come (numpy-free): the rule for `<eos>`, the stop text and
which text is final, shared by the in-process loop (`loop.DecoderModel.generate`) and the
served one (`batching.ContinuousBatcher`), so both stream the same pieces.

`push(token)` takes the next chosen id and returns the new FINAL text (maybe ""): text that may
yet turn out to begin the stop text is held back until it does not. The stream is `done` at
`<eos>` (reason "eos", the token not kept) or when the stop text appears (reason "stop", the
text cut before it; the token that completed it is kept in `token_ids`, as the loop always
did). `flush()` returns whatever was held back once the caller stops (reason stays "length").
"""

from __future__ import annotations

from typing import Any


def held_back(text: str, stop: str) -> int:
    """How many characters at the end of `text` could begin `stop` (not final yet)."""
    for k in range(min(len(stop) - 1, len(text)), 0, -1):
        if stop.startswith(text[-k:]):
            return k
    return 0


class TextStream:
    """The text of one sequence after its prompt (see the module docstring). `tokenizer` is
    the model's: its `stream(prompt ids)` decodes the new tokens one by one (a byte-level BPE
    holds back a character split over tokens); `last_prompt_id` is the prompt's last id."""

    def __init__(self, tokenizer: Any, last_prompt_id: int, eos_id: int,
                 stop: str | None = None) -> None:
        self.tokenizer = tokenizer
        self.decoder = tokenizer.stream([last_prompt_id])
        self.eos_id = eos_id
        self.stop = stop
        self.so_far = ""
        self.final: str | None = None
        self.reason = "length"
        self.token_ids: list[int] = []
        self.emitted = 0

    @property
    def done(self) -> bool:
        return self.final is not None

    @property
    def text(self) -> str:
        return self.final if self.final is not None else self.so_far

    def push(self, token: int) -> str:
        """Take the next chosen id; the new final text (nothing once done)."""
        if self.final is not None:
            return ""
        if token == self.eos_id:
            self.final, self.reason = self.so_far, "eos"
        else:
            self.so_far += self.decoder.push(int(token))
            self.token_ids.append(int(token))
            if self.stop is not None and self.stop in self.so_far:
                self.final = self.so_far[:self.so_far.index(self.stop)]
                self.reason = "stop"
        text = self.text
        safe = len(text) - (0 if self.final is not None or self.stop is None
                            else held_back(text, self.stop))
        piece = text[self.emitted:safe] if safe > self.emitted else ""
        self.emitted = max(self.emitted, safe)
        return piece

    def flush(self) -> str:
        """What is left to emit when the sequence ends here (held-back text included)."""
        text = self.text
        piece = text[self.emitted:]
        self.emitted = len(text)
        return piece
