"""Which allocator settings were in force at an OOM, as far as the snapshot or the pasted text tells, so the
doctor never advises a setting that is already on.

PyTorch's own OOM message ends with a hint ("If reserved but unallocated memory is large try setting
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."): the hint is printed whatever the
settings are, so it is no evidence. Only a setting stated elsewhere in the text counts (an `export`, an
`os.environ[...] = ...`, a command line).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from fragviz.allocator.config import AllocatorSettings, parse_alloc_conf
from fragviz.replay.analysis import Analysis
from fragviz.doctor.paste import clean_lines
from fragviz.base.errors import FragvizError


def _loose(phrase: str) -> str:
    """A pattern for `phrase` that a wrap, a repeated space or a cut inside a word does not break."""
    return r"\s*".join(re.escape(ch) for ch in phrase.replace(" ", ""))


# PyTorch's hint, printed whatever the settings (PYTORCH_HIP_ALLOC_CONF on ROCm, PYTORCH_ALLOC_CONF from 2.10)
_HINT = re.compile(_loose("try setting PYTORCH_") + r"(?:\s*(?:C\s*U\s*D\s*A|H\s*I\s*P)\s*_)?"
                   + _loose("ALLOC_CONF=expandable_segments:True to avoid fragmentation"), re.I)
_STATED = re.compile(r"PYTORCH_(?:CUDA_|HIP_)?ALLOC_CONF['\"]?\]?\s*[=:]\s*['\"]?([A-Za-z0-9_.:,\[\]>]+)")


@dataclass(frozen=True)
class InForce:
    """Settings known to be in force; None where the source does not tell."""

    expandable_segments: bool | None = None
    max_split_size: int | None = None  # bytes, when `split_known`; None is unlimited
    split_known: bool = False
    source: str = ""  # where they were read, for the advice to name
    conf: str | None = None  # the PYTORCH_CUDA_ALLOC_CONF string, where it is known


UNKNOWN = InForce()


def from_settings(settings: AllocatorSettings, source: str) -> InForce:
    return InForce(settings.expandable_segments, settings.max_split_size, True, source, settings.conf)


def in_force_of_snapshot(analysis: Analysis) -> InForce:
    """The snapshot's `allocator_settings` (PyTorch 2.1+ records them); else expandable segments seen in its
    segments; else unknown."""
    if analysis.snapshot.allocator_settings:
        return from_settings(analysis.settings, "the snapshot's allocator_settings")
    if any(s.is_expandable for s in analysis.snapshot.segments):
        return InForce(True, source="the snapshot's segments, which are expandable")
    return UNKNOWN


def in_force_of_text(text: str | None) -> InForce:
    """A PYTORCH_CUDA_ALLOC_CONF (or PYTORCH_ALLOC_CONF, PYTORCH_HIP_ALLOC_CONF) the pasted text states, leaving PyTorch's hint aside."""
    if not text:
        return UNKNOWN
    for value in _STATED.findall(_HINT.sub("", "\n".join(clean_lines(text)))):
        try:
            settings = parse_alloc_conf(value.rstrip(".,"))
        except FragvizError:
            continue
        return from_settings(settings, f"PYTORCH_CUDA_ALLOC_CONF={settings.conf} in the pasted text")
    return UNKNOWN
