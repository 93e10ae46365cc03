"""A gate's verdict as people and CI read it: plain text (the terminal, a failed test), Markdown (a pull request's
summary) and JUnit XML (any CI's test report)."""
from __future__ import annotations

import re
from xml.sax.saxutils import escape, quoteattr

from fragviz.base.units import format_bytes
from fragviz.gate.judge import BYTES, CANNOT_JUDGE, PASSED, Check, GateResult, SiteChange

TITLES = {"peak_reserved": "Peak reserved", "peak_allocated": "Peak allocated",
          "peak_reserved_growth": "Peak reserved growth", "peak_allocated_growth": "Peak allocated growth",
          "fragmentation": "Fragmentation at peak", "fits_device": "Fits the device"}
VERDICTS = {PASSED: "every memory budget holds", CANNOT_JUDGE: "cannot judge"}


def headline(result: GateResult) -> str:
    if result.status == PASSED:
        held = f"{len(result.checks)} budget(s)" if result.checks else "no budget given"
        return f"memory gate passed: {held}"
    if result.status == CANNOT_JUDGE:
        return f"memory gate cannot judge: {result.reason}"
    failed = sum(1 for c in result.checks if not c.passed)
    return f"memory gate FAILED: {failed} of {len(result.checks)} budget(s) broken"


def value_text(check: Check, value: float | None) -> str:
    if value is None:
        return "-"
    return format_bytes(value) if check.unit == BYTES else f"{value:.1%}"


def change_text(check: Check) -> str:
    if check.baseline is None:
        return "-"
    diff = check.value - check.baseline
    if check.unit != BYTES:
        return f"{diff * 100:+.1f} pts"
    pct = f" ({diff / check.baseline:+.1%})" if check.baseline else ""
    return ("+" if diff >= 0 else "-") + format_bytes(abs(diff)) + pct


def site_change_text(s: SiteChange) -> str:
    if s.before_bytes is None:
        return format_bytes(s.after_bytes)
    return f"{format_bytes(s.before_bytes)} -> {format_bytes(s.after_bytes)} (+{format_bytes(s.growth)})"


def moved_text(s: SiteChange) -> str:
    """" (line N in the baseline)" where the baseline held the site at another line, else ""."""
    return f" (line {s.before_line} in the baseline)" if s.moved else ""


# -- text ----------------------------------------------------------------------------------------------------------

def gate_text(result: GateResult) -> str:
    lines = [headline(result)]
    if result.candidate is not None:
        against = f" against {result.baseline.source}" if result.baseline else ""
        lines.append(f"candidate {result.candidate.source}{against}")
    if result.checks:
        lines.append("")
        width = max(len(TITLES.get(c.name, c.name)) + (len(f" (device {c.device})") if _many(result) else 0)
                    for c in result.checks)
        for c in result.checks:
            name = _check_name(c, result)
            lines.append(f"  {'ok  ' if c.passed else 'FAIL'} {name:<{width}}  {value_text(c, c.value):>11}  "
                         f"limit {value_text(c, c.limit):>11}  baseline {value_text(c, c.baseline):>11}  "
                         f"change {change_text(c)}")
    if result.sites:
        grew = result.baseline is not None
        lines += ["", "sites whose memory at the peak grew most:" if grew else "sites holding most memory at the peak:"]
        for s in result.sites:
            lines.append(f"  {site_change_text(s):>32}  {s.site}{moved_text(s)}")
            if s.frame and s.frame != s.site:
                lines.append(f"  {'':>32}    first user frame {s.frame}")
    elif result.baseline is not None and result.status != CANNOT_JUDGE:
        lines += ["", "no allocation site holds more memory at the peak than in the baseline"]
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)


def _many(result: GateResult) -> bool:
    return len({c.device for c in result.checks}) > 1


def _check_name(c: Check, result: GateResult) -> str:
    name = TITLES.get(c.name, c.name)
    return f"{name} (device {c.device})" if _many(result) else name


# -- Markdown ------------------------------------------------------------------------------------------------------

def gate_markdown(result: GateResult, command: str | None = None) -> str:
    icon = {PASSED: "✅", CANNOT_JUDGE: "⚠️"}.get(result.status, "❌")
    lines = [f"### {icon} {_md(headline(result))}", ""]
    if result.candidate is not None:
        against = f" against `{_code(result.baseline.source)}`" if result.baseline else ""
        lines += [f"Candidate `{_code(result.candidate.source)}`{against}.", ""]
    if result.checks:
        lines += ["| | Budget | Value | Limit | Baseline | Change |", "|---|---|---:|---:|---:|---:|"]
        for c in result.checks:
            lines.append(f"| {'✅' if c.passed else '❌'} | {_md(_check_name(c, result))} | {value_text(c, c.value)} | "
                         f"{value_text(c, c.limit)} | {value_text(c, c.baseline)} | {change_text(c)} |")
        lines.append("")
    if result.sites:
        grew = result.baseline is not None
        lines += ["**Sites whose memory at the peak grew most**" if grew else "**Sites holding most memory at the peak**",
                  "", "| Site | Before | After | First user frame |", "|---|---:|---:|---|"]
        for s in result.sites:
            before = "-" if s.before_bytes is None else format_bytes(s.before_bytes)
            lines.append(f"| `{_code(s.site)}`{moved_text(s)} | {before} | {format_bytes(s.after_bytes)} | "
                         f"{f'`{_code(s.frame)}`' if s.frame else '-'} |")
        lines.append("")
    lines += [f"> {_md(n)}" for n in result.notes]
    if command:
        lines += ["", f"Reproduce: `{_code(command)}`"]
    return "\n".join(lines).rstrip() + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _code(text: str) -> str:
    return text.replace("`", "'").replace("|", "\\|")


# -- JUnit XML -----------------------------------------------------------------------------------------------------

def gate_junit(result: GateResult, suite: str = "fragviz memory gate") -> str:
    """One test case per check (a gate that cannot judge is one errored case), failures carrying the text report."""
    report = _xml_text(gate_text(result))
    cases = []
    if result.status == CANNOT_JUDGE:
        why = quoteattr(_xml_text(result.reason or ""))
        cases.append(f'  <testcase classname="fragviz.gate" name="judge">\n'
                     f'    <error message={why}>{escape(report)}</error>\n  </testcase>')
    for c in result.checks:
        name = quoteattr(_check_name(c, result))
        if c.passed:
            cases.append(f'  <testcase classname="fragviz.gate" name={name}/>')
        else:
            detail = quoteattr(_xml_text(c.detail))
            cases.append(f'  <testcase classname="fragviz.gate" name={name}>\n'
                         f'    <failure message={detail}>{escape(report)}</failure>\n  </testcase>')
    failures = sum(1 for c in result.checks if not c.passed)
    errors = 1 if result.status == CANNOT_JUDGE else 0
    head = (f'<testsuite name={quoteattr(suite)} tests="{len(cases)}" failures="{failures}" errors="{errors}">')
    return "\n".join(['<?xml version="1.0" encoding="utf-8"?>', head, *cases, "</testsuite>"]) + "\n"


_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_text(text: str) -> str:
    """`text` with what XML 1.0 cannot hold as U+FFFD: a control character in a snapshot's frame names or a path
    would leave the whole report unreadable to a CI's parser."""
    return _NOT_XML.sub("\ufffd", text)
