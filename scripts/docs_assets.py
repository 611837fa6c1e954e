"""The docs site's files that come from the package, put into the site when it is built (a MkDocs hook, as
``scripts/docs_reference.py`` is): one copy in the repository, the package's.

- ``assets/javascripts/glyphs.js``: the playground's ``service/http/static/glyphs.js``, which finds the characters
  a browser has no font for (and the fix); ``docs/assets/javascripts/fonts.js`` says it on the pages that show
  them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
#: site path -> the package's file
FROM_THE_PACKAGE = {"assets/javascripts/glyphs.js": REPO / "service" / "http" / "static" / "glyphs.js"}


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for site_path, source in FROM_THE_PACKAGE.items():
        files.append(File.generated(config, site_path, abs_src_path=str(source)))
    return files
