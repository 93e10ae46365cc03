"""Finding the OOM messages in text as people paste it: copied from a terminal or a log (timestamps, `[rank3]:`,
pytest's `E   `, vLLM's worker prefixes on every line), from a GitHub issue (HTML escapes such as `&#39;` and
`&gt;`, `<br>`), wrapped across lines (at words, or mid-word at a terminal's width), with repeated spaces.

Each message found is given back on one line, whitespace collapsed, so that a list of them joined by newlines
reads back as the same list. The figures are read from its `compact` form (`message.py`): lower case, every
whitespace removed, so a break anywhere, even inside a word or a number's unit, cannot hide a figure.
"""
from __future__ import annotations

import html
import re

# Where one OOM message starts: the caching allocator's (CUDA or ROCm's HIP, every era), cudaMallocAsync's, the
# THC allocator's of PyTorch before 1.0, and a CUDA/HIP call outside the allocator that ran out of memory.
_START = re.compile(
    r"(?:CUDA|HIP)\s+out\s+of\s+memory"
    r"|Allocation\s+on\s+device\s+\d+\s+would\s+exceed\s+allowed\s+memory"
    r"|cuda\s+runtime\s+error\s*\(\s*2\s*\)\s*:\s*out\s+of\s+memory"
    r"|THCudaCheck\s+FAIL[^\n]*?out\s+of\s+memory"
    r"|(?:CUDA|HIP)\s+error\s*:\s*out\s+of\s+memory"
    r"|CUDA_ERROR_OUT_OF_MEMORY|hipErrorOutOfMemory", re.I)
# A message pasted from its second sentence on ("Tried to allocate 20.00 MiB (GPU 0; ...").
_BARE = re.compile(r"Tried\s+to\s+allocate\s+[0-9.]+\s*[KMGT]?i?B(?:ytes)?\s*(?:\(\s*GPU|\.\s*GPU)", re.I)
_BARE_REACH = 48  # a "Tried to allocate" this close after a start is that message's own
# What a log puts before each line; stripped (repeatedly) from every line before anything is read.
_PREFIXES = (
    re.compile(r"^\s*\[rank\s*\d+\]\s*:\s?"),  # torch.distributed's per-rank prefix
    re.compile(r"^E(?: {2,}|\t)"),  # pytest's failure lines
    re.compile(r"^\s*\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?Z?\]?\s*"),  # ISO timestamps
    re.compile(r"^\s*\((?:\w+)(?:\s+rank=\d+)?\s+pid=\d+(?:,\s*ip=[\d.]+)?\)\s*"),  # vLLM / Ray workers
    re.compile(r"^\s*(?:ERROR|WARNING|WARN|INFO|DEBUG|CRITICAL)\s+\d{2}-\d{2}\s+\d{2}:\d{2}:\d{2}(?:\.\d+)?\s*"
               r"(?:\[[^\]\n]*\]\s*)?"),  # vLLM's "ERROR 06-05 06:18:13 [file.py:470] "
    re.compile(r"^\s*>\s?"),  # a quoted line (Markdown, e-mail)
)
_TAGS = re.compile(r"</?(?:code|pre|p|span|div|b|i|em|strong|details|summary|tt|kbd|samp)\b[^>\n]*>", re.I)
_BREAKS = re.compile(r"<br\s*/?>", re.I)
# A line that cannot continue a message: the traceback or log record that follows it.
_STOP = re.compile(r"^\s*(?:$|Traceback\b|File \"|During handling\b|The above exception\b|Exception raised from\b"
                   r"|frame #\d|```|~~~)")
# The figures of a message are all read once its compact form holds the last figure's closing words; what may
# follow is only the rest of PyTorch's hint, which ends with one of _HINT_END.
_FIGURES_DONE = re.compile(r"butunallocated\.|\(gpu\d+;[^)]*\)|pytorchlimit\(setbyuser-suppliedmemoryfraction\):"
                           r"[0-9.]+(?:bytes|kib|mib|gib|tib)|outofmemoryat\S|\.cu:\d+|error:outofmemory"
                           r"|cuda_error_out_of_memory|hiperroroutofmemory")
_HINT_START = re.compile(r"(?:ifreserved|seedocumentation)")
_HINT_END = re.compile(r"environment-variables\)|memorymanagementandpytorch_(?:cuda_|hip_)?alloc_conf")
# The end of PyTorch's hint in the message as rejoined: what follows on the line is no longer the message.
_TEXT_END = re.compile(r"(?:environment-variables|#[a-z][\w-]*)\)|Memory\s*Management\s*and\s*PYTORCH_(?:CUDA_|HIP_)?"
                       r"ALLOC_CONF", re.I)
MAX_LINES = 24  # a wrapped message is a few lines; past this the text is something else
_WIDE = 60  # the shortest line taken for a terminal's hard wrap when several lines share its length


def clean_lines(text: str) -> list[str]:
    """The text's lines with HTML escapes and tags undone and every log prefix taken off."""
    text = _BREAKS.sub("\n", text)
    text = html.unescape(_TAGS.sub("", text)).replace("\u200b", "").replace("\r\n", "\n").replace("\r", "\n")
    return [_strip_prefixes(line) for line in text.split("\n")]


def _strip_prefixes(line: str) -> str:
    changed = True
    while changed:
        changed = False
        for pattern in _PREFIXES:
            stripped = pattern.sub("", line, count=1)
            if stripped != line:
                line, changed = stripped, True
    return line


def compact(text: str) -> str:
    """Lower case, no whitespace at all: the form the figures are read from."""
    return re.sub(r"\s+", "", text).lower()


def find_messages(text: str) -> list[str]:
    """Every OOM message in pasted text, each on one line, in order, each once."""
    joined = "\n".join(clean_lines(text))
    starts = _starts(joined)
    out: list[str] = []
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(joined)
        offset = start - (joined.rfind("\n", 0, start) + 1)  # where on its line the message starts
        message = _one_message(joined[start:end].split("\n"), offset)
        if message and message not in out:
            out.append(message)
    return _drop_thc_echoes(out)


def _starts(text: str) -> list[int]:
    starts = [m.start() for m in _START.finditer(text)]
    bare = [m.start() for m in _BARE.finditer(text) if not any(0 <= m.start() - s <= _BARE_REACH for s in starts)]
    return sorted(starts + bare)


def _one_message(lines: list[str], offset: int = 0) -> str:
    """The first line and the lines that continue it, until the message is complete or the text moves on;
    `offset` is where on its line the first line starts."""
    taken = [lines[0]]
    for line in lines[1:MAX_LINES]:
        if not _continues(compact(" ".join(taken)), line):
            break
        taken.append(line)
    return _rejoin(taken, offset)


def _continues(taken: str, line: str) -> bool:
    """Whether `line` goes on with the message read so far (`taken`, compact): until its figures are all read,
    any line that is no traceback or log record does; after, only the rest of PyTorch's hint."""
    if _STOP.match(line) or _HINT_END.search(taken):
        return False
    if not _FIGURES_DONE.search(taken):
        return True
    return bool(_HINT_START.search(taken.split("butunallocated.")[-1].split(")")[-1]))


def _rejoin(lines: list[str], offset: int = 0) -> str:
    """Lines wrapped at a terminal's width (several of the same length) join without a space: the wrap may have
    cut a word; lines wrapped at words join with one."""
    lengths = [len(line) + (offset if i == 0 else 0) for i, line in enumerate(lines[:-1])]
    width = max(lengths, default=0)
    hard = width >= _WIDE and lengths.count(width) >= 2
    out = lines[0]
    for length, line in zip(lengths, lines[1:]):
        out += ("" if hard and length == width else " ") + line
    out = re.sub(r"\s+", " ", out).strip()
    end = _TEXT_END.search(out)
    return out[:end.end()] if end else out


def _drop_thc_echoes(messages: list[str]) -> list[str]:
    """PyTorch before 1.0 printed `THCudaCheck FAIL ... out of memory` and then raised `cuda runtime error (2)`
    for the same failure: one OOM, not two."""
    out = []
    for message in messages:
        if out and out[-1].lower().startswith("thcudacheck") and message.lower().startswith("cuda runtime error"):
            out[-1] = message
            continue
        out.append(message)
    return out
