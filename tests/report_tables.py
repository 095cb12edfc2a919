"""Reading the report's HTML tables in tests: the text of each row's cells."""

from __future__ import annotations

import html
import re


def rows(page: str, heading: str) -> list[list[str]]:
    """The text of each row's cells of the table under ``heading`` (up to the next h2)."""
    assert heading in page, heading
    section = page.split(heading, 1)[1].split("<h2", 1)[0]
    return [[html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()
             for cell in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, re.S)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", section, re.S)]


def number(text: str) -> float:
    """A number as the report prints it (thousands separated by commas)."""
    return float(text.replace(",", ""))
