"""Whether this machine has fonts the browser tests' pages need, asked of fontconfig (which Chromium uses on
Linux): the pages say so when it has not (service/http/static/glyphs.js), and the tests check they do."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

GLYPHS_SCRIPT = Path(__file__).resolve().parent.parent / "service" / "http" / "static" / "glyphs.js"


def pages_fix() -> str:
    """The fix the pages give for characters without a font (``FIX`` in the playground's glyphs.js)."""
    return GLYPHS_SCRIPT.read_text().split('const FIX = "', 1)[1].split('"', 1)[0]


def chinese_font_installed() -> bool | None:
    """Whether fontconfig knows a font for Chinese (Debian's default install has none); None without fc-list."""
    fc_list = shutil.which("fc-list")
    if fc_list is None:
        return None
    listed = subprocess.run([fc_list, ":lang=zh", "family"], capture_output=True, text=True, timeout=30, check=True)
    return bool(listed.stdout.strip())
