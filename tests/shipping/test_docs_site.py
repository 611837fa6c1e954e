"""The docs site: it builds with ``--strict``, its reference pages hold exactly what the code has, it loads
nothing from another origin, and it renders -- home page and a guide, opened from disk -- in headless
Chromium, search included, with screenshots kept in ``test-results/docs/`` (``TOKENIZER_SERVICE_TEST_RESULTS``
moves it) so the look can be judged.

The reference pages are generated at build time (``scripts/docs_reference.py``); these tests read the *built*
HTML and compare it with the code itself -- the settings object, the app's routes, the option sets of
``service/wire.py``, the status table, every command's parser, ``service.client.__all__`` -- both ways: what
the code has is in the reference, and what the reference names is in the code.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unicodedata
from html import unescape
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from scripts import docs_reference
from testkit.servers import REPO

RESULTS = Path(os.environ.get("TOKENIZER_SERVICE_TEST_RESULTS", REPO / "test-results")) / "docs"
WAIT = 20.0


#: The site's build, as ``make docs`` runs it: CI builds the site here, in make test, not with make docs again.
BUILD = ("build", "--strict")


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built as ``make docs`` builds it (``--strict``), into a folder of the test's own."""
    out = tmp_path_factory.mktemp("site")
    mkdocs = Path(sys.prefix) / "bin" / "mkdocs"
    done = subprocess.run(
        [str(mkdocs), *BUILD, "--site-dir", str(out)],
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-4000:]}"
    return out


# -- reading the built pages ---------------------------------------------------------------------------------
class Page(HTMLParser):
    """A built page as the tests read it: its headings and tables in order, its code blocks, and the ids."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.items: list[tuple[str, Any]] = []  # ("heading", text) | ("table", rows) | ("pre", text)
        self.ids: set[str] = set()
        self._text: list[str] | None = None
        self._kind = ""
        self._rows: list[list[str]] = []
        self._cell: list[str] | None = None
        self.feed(path.read_text(encoding="utf-8"))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs).get("id")
        if found:
            self.ids.add(found)
        if tag in ("h1", "h2", "h3", "h4", "pre") and self._text is None:
            self._text, self._kind = [], tag
        elif tag == "table":
            self._rows = []
        elif tag == "tr":
            self._rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == self._kind and self._text is not None:
            text = "".join(self._text)
            self.items.append(("pre" if tag == "pre" else "heading", text.strip("¶ \n") if tag != "pre" else text))
            self._text = None
        elif tag in ("td", "th") and self._cell is not None:
            self._rows[-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self.items.append(("table", self._rows))

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text.append(data)
        if self._cell is not None:
            self._cell.append(data)

    def tables_under(self, heading: str) -> list[list[list[str]]]:
        """The tables between the heading whose text is ``heading`` and the next heading."""
        tables, inside = [], False
        for kind, value in self.items:
            if kind == "heading":
                inside = value == heading
            elif kind == "table" and inside:
                tables.append(value)
        return tables

    def first_column(self, heading: str) -> list[str]:
        return [row[0] for table in self.tables_under(heading) for row in table[1:]]


def page(site: Path, name: str) -> Page:
    return Page(site / name)


def assert_same(in_code: set[str], in_reference: set[str], what: str) -> None:
    assert in_code - in_reference == set(), f"{what} in the code but not in the built reference"
    assert in_reference - in_code == set(), f"{what} in the built reference but not in the code"


# -- the reference holds what the code has, both ways --------------------------------------------------------
def test_the_site_is_built_as_make_docs_builds_it():
    recipe = subprocess.run(
        ["make", "--dry-run", "--no-print-directory", "--always-make", "docs", "VENV=/nonexistent/venv"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()[-1]
    assert recipe == f"NO_MKDOCS_2_WARNING=1 /nonexistent/venv/bin/mkdocs {' '.join(BUILD)}"


def test_settings_reference_is_the_settings_object(site):
    from service.http.settings import Settings
    from service.wire import ENV_PREFIX

    rows = [row for table in page(site, "reference/settings.html").tables_under("Settings") for row in table[1:]]
    flags = {row[0].replace("--[no-]", "--") for row in rows}
    envs = {row[1] for row in rows}
    assert_same({"--" + name.replace("_", "-") for name in Settings.model_fields}, flags, "settings (flags)")
    assert_same({ENV_PREFIX + name.upper() for name in Settings.model_fields}, envs, "settings (variables)")


def test_http_reference_is_the_route_table(site):
    built = page(site, "reference/http.html")
    listed = set()
    for cell in built.first_column("Routes"):
        listed.add(cell.split()[-1])
    after = (site / "reference/http.html").read_text().split("static files", 1)[1].split("</p>", 1)[0]
    listed |= set(re.findall(r"<code>(/[^<]*)</code>", after))
    assert_same({route["path"] for route in docs_reference.routes()}, listed, "routes")


def test_http_reference_has_every_option_of_every_route(site):
    from service.http.routes import WORK_ROUTES

    built = page(site, "reference/http.html")
    sections = [value for kind, value in built.items if kind == "heading" and value.startswith("POST /")]
    assert_same({f"POST {route.path}" for route in WORK_ROUTES}, set(sections), "work routes")
    for route in WORK_ROUTES:
        declared = {f.name for f in dataclasses.fields(route.request.option_set)}
        fields = set(built.first_column(f"POST {route.path}"))
        assert_same(set(route.request.model_fields), fields, f"fields of POST {route.path}")
        assert declared <= fields


def test_http_reference_has_every_error_kind_and_its_status(site):
    from service.http.responses import STATUS_BY_KIND

    rows = [row for table in page(site, "reference/http.html").tables_under("Errors") for row in table[1:]]
    assert_same({f"{k.value} {s}" for k, s in STATUS_BY_KIND.items()}, {f"{r[0]} {r[1]}" for r in rows}, "errors")


def test_cli_reference_has_every_flag_of_every_command(site):
    built = page(site, "reference/cli.html")
    helps = [value for kind, value in built.items if kind == "pre"]
    parsers = docs_reference.command_parsers()
    assert len(helps) == len(parsers), "one --help per command"
    every_flag = {
        option for parser in parsers.values() for action in parser._actions for option in action.option_strings
    }
    for (prog, parser), text in zip(parsers.items(), helps, strict=True):
        assert text.startswith(f"usage: {prog} "), text[:80]
        # every long flag of the command (--no-* forms included) is shown; a flag the text names is one that
        # exists (its own, or another command's, as "the same as serve --model")
        flags = {option for action in parser._actions for option in action.option_strings if option.startswith("--")}
        unwrapped = re.sub(r"(?<=\w-)\n\s+", "", unescape(text))  # argparse wraps lines at hyphens too
        shown = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", unwrapped))
        assert flags - shown == set(), f"flags of {prog} in the code but not in the built reference"
        assert shown - every_flag == set(), f"the reference of {prog} names flags no command has"


def test_python_reference_has_the_public_client(site):
    import service.client

    built = page(site, "reference/python.html")
    documented = {found.rsplit(".", 1)[-1] for found in built.ids if found.startswith("service.")}
    text = (site / "reference/python.html").read_text()
    for name in service.client.__all__:
        if name.endswith("_ENV"):
            assert f"service.client.{name}" in text, name
        else:
            assert name in documented, f"service.client.{name} is not in the Python reference"
    for found in built.ids:  # every documented object exists
        if found.startswith("service."):
            assert _resolves(found), f"the Python reference documents {found}, which the code does not have"


#: mkdocstrings-python's signature line length (its ``line_length`` option, left at its default).
SIGNATURE_COLUMNS = 60


def test_the_python_references_signatures_are_formatted_and_a_build_without_ruff_refuses(site, tmp_path):
    """Defect: in a venv without ruff (the docs extra did not name it; make lint's extra has it), mkdocstrings
    wrote each signature on one line, logging it only at INFO, and the page wrapped 8 of them under the copy
    button. Every signature is formatted to its line length, and a build without ruff fails saying what to
    install."""
    text = (site / "reference" / "python.html").read_text()
    blocks = re.findall(r'<div class="doc-signature[^"]*"><pre>(.*?)</pre>', text, re.S)
    signatures = [unescape(re.sub(r"<[^>]+>", "", block)).rstrip("\n").split("\n") for block in blocks]
    assert len(signatures) > 50, f"only {len(signatures)} signatures found"
    unformatted = [lines[0] for lines in signatures if max(map(len, lines)) > SIGNATURE_COLUMNS]
    assert not unformatted, unformatted
    (tmp_path / "ruff").mkdir()  # a ruff that cannot be imported, first on the path
    (tmp_path / "ruff" / "__init__.py").write_text("raise ImportError('no ruff in this venv')\n")
    done = subprocess.run(
        [str(Path(sys.prefix) / "bin" / "mkdocs"), *BUILD, "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0 and "formatted by ruff" in done.stderr, done.stderr[-2000:]
    assert "pip install -e '.[docs]'" in done.stderr


def _resolves(dotted: str) -> bool:
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(obj, attribute):
                return False
            obj = getattr(obj, attribute)
        return True
    return False


def test_every_guide_is_in_the_site_and_the_readme_links_resolve(site):
    for md in (REPO / "docs").rglob("*.md"):
        built = site / md.relative_to(REPO / "docs").with_suffix(".html")
        assert built.exists(), f"{md} was not built"
    readme = (REPO / "README.md").read_text()
    for target in re.findall(r"\]\(((?:docs|deploy)/[^)#\s]+)", readme):
        assert (REPO / target).exists(), f"README links to {target}, which does not exist"


def test_the_site_loads_nothing_from_another_origin(site):
    """No script, style, font or image from elsewhere: the site works opened from disk, offline."""
    external = re.compile(r"""<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)=["'](?:https?:)?//""", re.I)
    for html in site.rglob("*.html"):
        for found in external.finditer(html.read_text(encoding="utf-8")):
            tag = found.group(0)
            assert 'rel="noopener"' in tag or "<link" not in tag, f"{html.name}: {tag}"
            assert not tag.lower().startswith(("<script", "<img", "<iframe")), f"{html.name}: {tag}"
            assert "stylesheet" not in tag and "preconnect" not in tag, f"{html.name}: {tag}"
    for css in site.rglob("*.css"):
        assert not re.search(r"@import\s+url\(\s*['\"]?https?:", css.read_text()), css
        assert "fonts.googleapis" not in css.read_text(), css


# -- in a real browser -----------------------------------------------------------------------------------------
def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="module")
def browser() -> Any:
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (the test extra)")
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if binary is None or driver_path is None:
        message = "the docs' browser test needs Debian's chromium and chromium-driver"
        if _in_ci():
            pytest.fail(f"CI is set: {message}", pytrace=False)
        pytest.skip(message)
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
    ):
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="docs-chromium-")
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    driver.set_page_load_timeout(WAIT)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


# Every script, style sheet, image and frame the page holds, by the URL the browser resolved.
LOADED = """
return Array.from(document.querySelectorAll('script[src], link[href], img[src], iframe[src]'))
  .filter(e => e.tagName !== 'LINK' || !['canonical', 'next', 'prev'].includes(e.rel))
  .map(e => e.src || e.href);
"""


def _open(browser: Any, path: Path) -> None:
    from selenium.webdriver.support.wait import WebDriverWait

    browser.get(path.as_uri())
    WebDriverWait(browser, WAIT).until(lambda b: b.execute_script("return document.readyState") == "complete")
    loaded = browser.execute_script(LOADED)
    assert loaded and all(url.startswith("file://") for url in loaded), [u for u in loaded if "file:" not in u]
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors


def _screenshot(browser: Any, name: str) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.png"
    assert browser.save_screenshot(str(path)), path
    return path


@pytest.mark.slow
def test_home_page_and_a_guide_render_from_disk_with_search(browser, site):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    _open(browser, site / "index.html")
    assert browser.find_element(By.CSS_SELECTOR, "article h1").text == "tokenizer-service"
    nav = browser.execute_script(
        "return Array.from(document.querySelectorAll('.md-nav__link')).map(e => e.textContent)"
    )
    assert any("The DataLoader client" in text for text in nav)
    _screenshot(browser, "home")

    _open(browser, site / "guides" / "dataloader.html")
    code = browser.find_elements(By.CSS_SELECTOR, "article pre code")
    assert code and "TokenizerClient" in code[0].text  # highlighted code, as a reader sees it
    width = browser.execute_script("return document.querySelector('article').getBoundingClientRect().width")
    assert width > 500, "the article has room beside the navigation"
    _screenshot(browser, "guide-dataloader")

    # search works opened from disk (Material's search worker runs in our iframe shim: no server, no CDN)
    box = browser.find_element(By.CSS_SELECTOR, "input.md-search__input")
    browser.execute_script("arguments[0].focus()", box)
    box.send_keys("fingerprint")
    WebDriverWait(browser, WAIT).until(
        lambda b: b.find_elements(By.CSS_SELECTOR, ".md-search-result__item"),
        "search found nothing from disk",
    )
    _screenshot(browser, "search")


#: The source's line length: a code block's line up to this many columns shows on one line at 1280 px.
CODE_COLUMNS = 120
# Every code block of the page as the reader sees it: its text, how many lines it takes on screen, whether its
# text runs past its edge (scrolled out of sight), and whether any of its text lies under its copy button.
CODE_BLOCKS = """
return Array.from(document.querySelectorAll('article pre > code')).map(code => {
  const style = getComputedStyle(code);
  const inner = code.clientHeight - parseFloat(style.paddingTop) - parseFloat(style.paddingBottom);
  const button = code.parentElement.querySelector('.md-code__nav, .md-clipboard');
  let covered = false;
  if (button) {
    const b = button.getBoundingClientRect();
    const range = document.createRange();
    range.selectNodeContents(code);
    covered = Array.from(range.getClientRects()).some(r => r.width > 0.5 && r.right > b.left + 0.5
      && r.left < b.right - 0.5 && r.bottom > b.top + 0.5 && r.top < b.bottom - 0.5);
  }
  return {text: code.textContent, shownLines: Math.round(inner / parseFloat(style.lineHeight)),
          hidden: code.scrollWidth > code.clientWidth + 1, covered: covered, button: button !== null};
});
"""


def columns(line: str) -> int:
    """How many columns a line of code takes in a monospace font (a CJK character takes two)."""
    return sum(2 if unicodedata.east_asian_width(char) in ("W", "F") else 1 for char in line)


@pytest.mark.slow
def test_every_code_block_shows_all_of_its_text_at_1280_px(browser, site):
    """Defect: in a 1280 px window the site cut code blocks (120-column blocks in a ~75-column content area:
    the first DataLoader example hid `collate_fn=collate)` past its edge, 73 of 188 blocks), and the copy
    button covered text of getting-started's first block. On every page, in the browser's 1280 px window: no
    block hides text past its edge, a block of lines within 120 columns shows each of them on one line (a
    longer one wraps), and no text lies under a copy button."""
    assert browser.execute_script("return window.innerWidth") == 1280
    problems, seen = [], 0
    for html in sorted(site.rglob("*.html")):
        if "assets" in html.relative_to(site).parts or html.name == "404.html":  # (its links are the server's)
            continue
        _open(browser, html)
        for number, block in enumerate(browser.execute_script(CODE_BLOCKS), 1):
            seen += 1
            where = f"{html.relative_to(site)} block {number} ({block['text'][:40]!r})"
            lines = block["text"].rstrip("\n").split("\n")
            if block["hidden"]:
                problems.append(f"{where}: text hidden past its edge")
            if max(map(columns, lines)) <= CODE_COLUMNS and block["shownLines"] != len(lines):
                shown = block["shownLines"]
                problems.append(f"{where}: {len(lines)} lines within {CODE_COLUMNS} columns shown on {shown}")
            if not block["button"] or block["covered"]:
                problems.append(f"{where}: {'text under' if block['button'] else 'no'} copy button")
    assert seen > 100, f"only {seen} code blocks found"
    assert not problems, f"{len(problems)} of {seen} code blocks:\n" + "\n".join(problems)
    _open(browser, site / "guides" / "dataloader.html")
    _screenshot(browser, "code-blocks-1280")


@pytest.mark.slow
def test_characters_without_a_font_are_said_on_the_page_with_the_fix(browser, site):
    """Defect: on a machine without a font for Chinese (Debian's default), the docs' Chinese showed as boxes
    and nothing said why. A page that shows such characters says so at its top, with the fix, exactly when
    this machine has no such font (the playground's own finding, glyphs.js, copied into the site); a page
    without them says nothing. The pages where a reader first meets them say it in their text too."""
    from testkit.fonts import chinese_font_installed, pages_fix

    for page_name in ("getting-started.md", "guides/playground.md"):
        assert pages_fix() in (REPO / "docs" / page_name).read_text(), page_name
    installed = chinese_font_installed()
    if installed is None:
        pytest.skip("no fc-list to ask which fonts this machine has")
    note = "const n = document.querySelector('article .missing-fonts'); return n ? n.textContent : null"
    _open(browser, site / "getting-started.html")
    shown = browser.execute_script(note)
    if installed:
        assert shown is None, shown
    else:
        assert shown is not None, "boxes, and nothing said"
        assert "no font for Chinese, Japanese and Korean characters" in shown and pages_fix() in shown, shown
        _screenshot(browser, "missing-fonts")
    _open(browser, site / "reference" / "settings.html")  # no Chinese there
    assert browser.execute_script(note) is None


def written_forms(value: Any) -> set[str]:
    """How the docs may write a default: ``4096``, ``65,536``, ``64 MiB``, ``32 KiB``, ``30 s``."""
    forms = {str(value), f"{value:,}"}
    if isinstance(value, float):
        forms.add(f"{value:g} s")
    elif isinstance(value, int):
        for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value >= size and value % size == 0:
                forms.add(f"{value // size} {unit}")
    return forms


def test_the_limits_page_gives_the_settings_own_defaults():
    """The table of limits (docs/explanations/limits.md) names each setting beside its default: each default
    it writes is the one the settings object declares (a default changed in the code fails here)."""
    from service.engine.memory import DEFAULT_BUDGET_WITHOUT_LIMIT, RESTING_MEMORY
    from service.http.settings import Settings

    text = (REPO / "docs" / "explanations" / "limits.md").read_text("utf-8")
    table = text[text.index("| limit (setting) | default |") :].split("\n\n", 1)[0]
    checked = set()
    for row in table.splitlines()[2:]:
        limit, default = row.split(" | ")[:2]
        for flag in re.findall(r"`--([a-z-]+)`", limit):
            field = Settings.model_fields[flag.replace("-", "_")]
            wanted = field.default
            if wanted is None:  # the memory budget: its default is computed, from these
                assert (
                    f"{RESTING_MEMORY >> 20} MiB" in default and f"{DEFAULT_BUDGET_WITHOUT_LIMIT >> 20} MiB" in default
                )
            else:
                written = {
                    number + unit for number, unit in re.findall(r"(\d(?:[\d,.]*\d)?)((?: [KMG]iB| s)?)", default)
                }
                assert written_forms(wanted) & written, (flag, default)
            checked.add(flag)
    assert len(checked) >= 12, checked
