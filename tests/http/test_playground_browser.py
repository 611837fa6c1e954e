"""The playground in a real browser: headless Chromium (Debian's ``chromium`` and ``chromium-driver``) driven
by selenium loads the page from a real server, types texts -- Chinese, emoji, combining marks, a pair, a 100k
paste -- and checks that what it draws is what ``/encode`` returns: the same ids in the same order, one span
per token over exactly its characters (offsets are code points, JavaScript strings UTF-16), nothing dropped
or drawn twice, special tokens marked, the count, the id list. Then the same with an API key.

Without Chromium, chromedriver or selenium the tests skip, saying what to install -- except in CI (``CI`` set),
where a missing browser fails. Screenshots land in ``test-results/playground/`` (``TOKENIZER_SERVICE_TEST_RESULTS``
moves it), which CI keeps as an artifact.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service import wire
from service.http.playground import RENDER_CAP
from testkit.fonts import chinese_font_installed, pages_fix
from testkit.servers import REPO, ServerProcess

pytestmark = pytest.mark.slow  # drives headless Chromium: `make test-fast` leaves it to CI

CHROMIUM_FLAGS = (
    # without these, Chromium on a closed network waits on update, sync and field-trial fetches
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1100,900",
)
RESULTS = Path(os.environ.get("TOKENIZER_SERVICE_TEST_RESULTS", REPO / "test-results")) / "playground"
WAIT = 20.0  # seconds: the bound of every wait on the page (never reached when it works)
API_KEY = "playground-s3cret"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def missing_browser(reason: str) -> None:
    message = (
        f"{reason}; the playground's browser tests need Debian's chromium and chromium-driver "
        "(`apt-get install -y chromium chromium-driver`) and selenium (the test extra)"
    )
    if in_ci():
        pytest.fail(f"CI is set: {message}", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session", autouse=True)
def chromium() -> tuple[str, str]:
    """The browser and its driver, or skip (fail in CI). Session-scoped and autouse, so it runs before the
    session's servers start: a machine without a browser skips at once."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing_browser("selenium is not installed")
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    chromedriver = shutil.which("chromedriver")
    if binary is None or chromedriver is None:
        missing_browser("no chromium" if binary is None else "no chromedriver")
    return binary, chromedriver


@pytest.fixture(scope="module")
def driver(chromium: tuple[str, str]) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, chromedriver = chromium
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="playground-chromium-")
    options.add_argument(f"--user-data-dir={profile}")  # a fresh profile: no state from another run
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # the driver path is given, so selenium never looks for (or downloads) one
    browser = webdriver.Chrome(options=options, service=Service(chromedriver))
    browser.set_page_load_timeout(WAIT)
    browser.set_script_timeout(WAIT)
    try:
        yield browser
    finally:
        browser.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    log = tmp_path_factory.mktemp("playground") / "keyed.log"
    with ServerProcess("--api-key", API_KEY, log_path=log) as server:
        yield server


# -- talking to the service directly: what the page must show ---------------------------------------------
def post(server: ServerProcess, path: str, body: dict[str, Any], key: str | None = None) -> dict[str, Any]:
    headers = {"Content-Type": "application/json"}
    if key:
        headers[wire.AUTHORIZATION_HEADER] = f"{wire.AUTH_SCHEME} {key}"
    request = urllib.request.Request(server.url + path, json.dumps(body).encode(), headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        result: dict[str, Any] = json.load(response)
        return result


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def expected_view(server: ServerProcess, text: str, pair: str | None, key: str | None = None, **options: Any):
    """What /encode and /tokenize answer for the page's call: ids, offsets, special mask, tokens, sequences."""
    texts: dict[str, Any] = {"texts": [text]} if pair is None else {"texts": [text], "text_pairs": [pair]}
    options = {"add_special_tokens": True, **options}  # the page always sends it (the two routes' defaults differ)
    encoded = post(
        server,
        wire.ENCODE_PATH,
        {**texts, **options, "return_offsets_mapping": True, "return_special_tokens_mask": True},
        key,
    )
    tokenized = post(server, wire.TOKENIZE_PATH, {**texts, **options, "return_sequence_ids": True}, key)
    return {
        "ids": encoded["input_ids"][0],
        "offsets": [tuple(o) for o in encoded["offset_mapping"][0]],
        "special": encoded["special_tokens_mask"][0],
        "tokens": tokenized["tokens"][0],
        "sequences": tokenized["sequence_ids"][0],
    }


# -- driving the page --------------------------------------------------------------------------------------
def wait_until(browser: Any, condition: Any, what: str) -> Any:
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.wait import WebDriverWait

    try:
        return WebDriverWait(browser, WAIT, poll_frequency=0.05).until(lambda _: condition())
    except TimeoutException:
        pytest.fail(f"the page did not {what} within {WAIT}s", pytrace=False)


def open_page(browser: Any, url: str) -> None:
    browser.get(url)
    wait_until(
        browser,
        lambda: browser.execute_script(
            "return !document.getElementById('workspace').hidden || !document.getElementById('key-form').hidden"
        ),
        "start",
    )


def type_text(browser: Any, element_id: str, text: str) -> None:
    """Replace a box's text as a person would: select all, then type (key events for plain text; the
    browser's text input, as an input method or a paste does, for characters beyond the BMP, which
    chromedriver cannot type)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = browser.find_element(By.ID, element_id)
    box.click()
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.BACKSPACE)
    if text and all(ord(c) <= 0xFFFF for c in text) and len(text) <= 200:
        box.send_keys(text)
    elif text:
        browser.execute_cdp_cmd("Input.insertText", {"text": text})
    assert browser.execute_script(f"return document.getElementById('{element_id}').value") == text


def paste(browser: Any, element_id: str, text: str) -> None:
    """Replace a box's text at once, as a paste does. (Chromium's own editing path -- a real paste, or
    typing -- spends seconds on 100k characters in any textarea; the page is what is under test.)"""
    browser.execute_script(
        "const box = document.getElementById(arguments[0]); box.focus(); box.value = arguments[1];"
        "box.dispatchEvent(new InputEvent('input', {inputType: 'insertFromPaste', bubbles: true}));",
        element_id,
        text,
    )


def page_ids(browser: Any) -> list[int] | None:
    value = browser.execute_script("return document.getElementById('ids').value")
    return json.loads(value) if value else None


# What the page drew, read back from the DOM: every child of the token box, in order.
READ_DRAWING = """
const nodes = [];
for (const node of document.getElementById('tokens').children) {
  const kind = node.classList.contains('tok') ? 'tok' : node.classList.contains('gap') ? 'gap'
    : node.classList.contains('seq-label') ? 'label' : node.tagName.toLowerCase();
  nodes.push({kind, text: node.textContent, id: node.dataset.id === undefined ? null : Number(node.dataset.id),
    start: node.dataset.start === undefined ? null : Number(node.dataset.start),
    end: node.dataset.end === undefined ? null : Number(node.dataset.end),
    special: node.classList.contains('special'), shared: node.classList.contains('shared')});
}
// as JSON: a lone surrogate (half of a character cut by a wrong offset) survives the trip and fails the test
return JSON.stringify(nodes);
"""


def assert_page_shows(browser: Any, view: dict[str, Any], text: str, pair: str | None) -> list[dict[str, Any]]:
    """The page's drawing, count and id list are exactly ``view`` (what the service answered)."""
    ids = view["ids"]
    wait_until(browser, lambda: page_ids(browser) == ids, f"show the ids /encode returns ({len(ids)} ids)")
    assert browser.execute_script("return document.getElementById('count').textContent") == f"{len(ids):,}"
    characters = len(text) + (len(pair) if pair is not None else 0)  # code points, as Python counts
    assert browser.execute_script("return document.getElementById('chars').textContent") == f"{characters:,}"
    assert browser.execute_script("return document.getElementById('error').hidden")

    nodes = json.loads(browser.execute_script(READ_DRAWING))
    tokens = [n for n in nodes if n["kind"] == "tok"]
    drawn = min(len(ids), RENDER_CAP)
    assert [t["id"] for t in tokens] == ids[:drawn], "one span per id, in order"
    assert [(t["start"], t["end"]) for t in tokens] == view["offsets"][:drawn]
    assert [t["special"] for t in tokens] == [s is None for s in view["sequences"][:drawn]]
    assert all(view["special"][i] for i, t in enumerate(tokens) if t["special"]), "special tokens marked"

    # Each token span shows exactly the characters it came from that no token before it showed; a token
    # of characters already shown (bytes of one character) is a sliver of its own, never dropped.
    sources = [text, pair or ""]
    shown = [0, 0]
    seq = 0
    rebuilt = ["", ""]
    i = -1  # the token index
    for node in nodes:
        if node["kind"] == "tok":
            i += 1
        if node["kind"] == "label":
            seq = 1
        elif node["kind"] == "gap":
            rebuilt[seq] += node["text"]
        elif node["kind"] == "tok" and node["special"]:
            assert node["text"] == view["tokens"][i], "a special token shows its token string"
        elif node["kind"] == "tok":
            seq = view["sequences"][i]
            start, end = view["offsets"][i]
            expected = sources[seq][max(start, shown[seq]) : end]
            assert node["text"] == expected, f"token {i} (id {node['id']}, offsets {start}-{end})"
            assert node["shared"] == (expected == "")
            rebuilt[seq] += node["text"]
            shown[seq] = max(shown[seq], end)
    if drawn == len(ids):  # every character of both texts drawn once, in order
        assert rebuilt == [text, pair or ""]
    else:  # capped: the text up to the last drawn token, no further; and the page says so
        assert rebuilt[0] == text[: shown[0]]
        notice = browser.execute_script("return document.getElementById('cap').textContent")
        assert f"first {RENDER_CAP:,} of {len(ids):,} tokens" in notice
    assert browser.execute_script("return document.getElementById('cap').hidden") == (drawn == len(ids))
    return tokens


def hover(browser: Any, index: int) -> str:
    """Hover token ``index``; the tooltip's text."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    span = browser.find_element(By.CSS_SELECTOR, f'#tokens .tok[data-i="{index}"]')
    browser.execute_script("arguments[0].scrollIntoView({block: 'nearest'})", span)
    ActionChains(browser).move_to_element(span).perform()
    wait_until(
        browser,
        lambda: browser.execute_script(
            "const t = document.getElementById('tooltip'); return !t.hidden && t.dataset.i === arguments[0]",
            str(index),
        ),
        f"show the tooltip of token {index}",
    )
    text: str = browser.execute_script("return document.getElementById('tooltip').innerText")
    return text


def screenshot(browser: Any, name: str) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.png"
    assert browser.save_screenshot(str(path)), path
    return path


def set_options(browser: Any, *, special: bool = True, truncation: str = "", max_length: str = "") -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.select import Select

    box = browser.find_element(By.ID, "add-special-tokens")
    if box.is_selected() != special:
        box.click()
    Select(browser.find_element(By.ID, "truncation")).select_by_value(truncation)
    if truncation:
        type_text(browser, "max-length", max_length)


def set_pair(browser: Any, on: bool) -> None:
    from selenium.webdriver.common.by import By

    box = browser.find_element(By.ID, "pair-on")
    if box.is_selected() != on:
        box.click()


def assert_nothing_logged_and_nothing_sent_elsewhere(browser: Any, server: ServerProcess, *texts: str) -> None:
    for entry in browser.get_log("browser"):
        for text in texts:
            assert text[:20] not in entry["message"], f"the console holds a text: {entry}"
    origins = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => new URL(e.name).origin).concat([location.origin])"
    )
    assert set(origins) == {server.url}, origins


# -- the tests ------------------------------------------------------------------------------------------------
CHINESE = "今天天气很好，我们去公园散步。The weather is nice today."
EMOJI = "a👩‍👩‍👧‍👦 b😀 café e\u0301 n\u0303 你好 🏳️‍🌈 👍🏽"
PAIR = "第二句 second text 😀"


def test_chinese_a_pair_and_the_options_draw_what_encode_returns(driver, servers):
    from selenium.webdriver.common.by import By

    server = servers["wordpiece_default"]
    open_page(driver, server.url + wire.PLAYGROUND_PATH)
    source = driver.execute_script("return document.getElementById('info-source').textContent")
    info = json.load(urllib.request.urlopen(server.url + wire.INFO_PATH, timeout=10))
    assert source == info["source"]
    assert (
        driver.execute_script("return document.getElementById('info-fingerprint').textContent") == info["fingerprint"]
    )
    assert (
        driver.execute_script("return document.getElementById('info-vocab').textContent") == f"{info['vocab_size']:,}"
    )

    # typed key by key: the debounced live encode
    type_text(driver, "text", CHINESE)
    view = expected_view(server, CHINESE, None)
    tokens = assert_page_shows(driver, view, CHINESE, None)
    assert tokens[0]["special"] and tokens[-1]["special"]  # [CLS] ... [SEP]
    tip = hover(driver, 1)
    assert f"id {view['ids'][1]}" in tip and view["tokens"][1] in tip and "characters 0–1" in tip
    assert "special" in hover(driver, 0)
    driver.find_element(By.ID, "copy-ids").click()  # the clipboard API, or the select-and-copy fallback
    wait_until(driver, lambda: driver.find_element(By.ID, "copied").text == "copied", "copy the id list")

    set_pair(driver, True)
    type_text(driver, "pair", PAIR)  # beyond the BMP: typed through the browser's text input
    view = expected_view(server, CHINESE, PAIR)
    tokens = assert_page_shows(driver, view, CHINESE, PAIR)
    assert [t["special"] for t in tokens].count(True) == 3  # [CLS] A [SEP] B [SEP]
    first_of_pair = view["sequences"].index(1)
    assert view["tokens"][first_of_pair] in hover(driver, first_of_pair)
    hover(driver, first_of_pair + 3)
    screenshot(driver, "chinese-pair")  # docs/playground.png is this one

    set_options(driver, truncation="longest_first", max_length="12")
    view = expected_view(server, CHINESE, PAIR, add_special_tokens=True, truncation="longest_first", max_length=12)
    assert len(view["ids"]) == 12
    assert_page_shows(driver, view, CHINESE, PAIR)
    screenshot(driver, "pair-truncated")

    set_options(driver, special=False, truncation="only_second", max_length="24")
    view = expected_view(server, CHINESE, PAIR, add_special_tokens=False, truncation="only_second", max_length=24)
    tokens = assert_page_shows(driver, view, CHINESE, PAIR)
    assert not any(t["special"] for t in tokens)

    set_options(driver, special=False, truncation="only_first", max_length="2")  # the pair alone is longer
    wait_until(
        driver,
        lambda: driver.execute_script("return document.getElementById('error').textContent").endswith(
            "Sequence to truncate too short to respect the provided max_length"
        ),
        "show the service's refusal",
    )

    set_options(driver, special=True)  # truncation off again
    set_pair(driver, False)
    type_text(driver, "text", "")  # empty text: the special tokens alone
    view = expected_view(server, "", None)
    assert len(view["ids"]) == 2
    assert_page_shows(driver, view, "", None)
    assert driver.execute_script("return document.getElementById('chars-per-token').textContent") == "–"
    assert_nothing_logged_and_nothing_sent_elsewhere(driver, server, CHINESE, PAIR)
    log = Path(str(server.log_path)).read_text(errors="replace")
    assert CHINESE[:6] not in log and PAIR[:3] not in log, "the server logs no text"


def test_byte_level_tokens_of_part_of_a_character_are_all_drawn(driver, servers):
    """Emoji (beyond the BMP: two UTF-16 units), ZWJ sequences, combining marks, CJK on byte-level BPE:
    several tokens share one character, and each is drawn."""
    server = servers["bytelevel_bpe"]
    open_page(driver, server.url + "/")
    set_options(driver, special=True)
    set_pair(driver, True)
    type_text(driver, "text", EMOJI)
    type_text(driver, "pair", PAIR)
    view = expected_view(server, EMOJI, PAIR)
    tokens = assert_page_shows(driver, view, EMOJI, PAIR)
    shared = [i for i, t in enumerate(tokens) if t["shared"]]
    assert len(shared) >= 5, "byte-level tokens of one character are drawn as their own spans"
    tip = hover(driver, shared[0])
    assert f"id {view['ids'][shared[0]]}" in tip and "drawn with the token before" in tip
    screenshot(driver, "byte-level-emoji")


def test_characters_without_a_font_are_said_where_they_show_with_the_fix(driver, servers):
    """Defect: on a machine without a font for Chinese (Debian's default), the default tokenizer's Chinese
    showed as boxes in the playground, and nothing said why. The page says so under the tokens, with the
    fix, exactly when this machine has no such font (fontconfig, which Chromium uses, is asked), and says
    nothing for a text it can draw."""
    installed = chinese_font_installed()
    if installed is None:
        pytest.skip("no fc-list to ask which fonts this machine has")
    server = servers["wordpiece_default"]
    open_page(driver, server.url + "/")
    set_pair(driver, False)
    type_text(driver, "text", CHINESE)
    assert_page_shows(driver, expected_view(server, CHINESE, None), CHINESE, None)
    shown = driver.execute_script("const n = document.getElementById('fonts'); return n.hidden ? null : n.textContent")
    if installed:
        assert shown is None, shown
    else:
        assert shown is not None, "boxes, and nothing said"
        assert "no font for Chinese, Japanese and Korean characters" in shown and pages_fix() in shown, shown
        screenshot(driver, "missing-fonts")
    type_text(driver, "text", "plain English text")
    assert_page_shows(driver, expected_view(server, "plain English text", None), "plain English text", None)
    assert driver.execute_script("return document.getElementById('fonts').hidden")


def test_a_100k_character_paste_is_capped_and_the_page_stays_responsive(driver, servers, corpus):
    server = servers["wordpiece_default"]
    open_page(driver, server.url + "/")
    set_options(driver, special=True)
    set_pair(driver, False)
    text = ""
    while len(text) < 100_000:
        text += "\n".join(corpus["zh"][:50] + corpus["en"][:20]) + "\n"
    text = text[:100_000]
    paste(driver, "text", text)
    view = expected_view(server, text, None)
    assert len(view["ids"]) > RENDER_CAP
    assert_page_shows(driver, view, text, None)
    assert driver.execute_script("return document.querySelectorAll('#tokens .tok').length") == RENDER_CAP
    screenshot(driver, "100k-paste")
    # still answering: the next edit is drawn
    type_text(driver, "text", "still here 还在")
    assert_page_shows(driver, expected_view(server, "still here 还在", None), "still here 还在", None)


def test_with_an_api_key_the_page_asks_once_and_keeps_it_in_the_tab(driver, keyed_server):
    from selenium.webdriver.common.by import By

    server = keyed_server
    assert status_of(server.url + "/") == 200  # the page itself is static and open...
    assert status_of(server.url + wire.INFO_PATH) == 401  # ...every API call needs the key
    open_page(driver, server.url + "/")
    assert driver.execute_script("return document.getElementById('workspace').hidden")
    assert "needs an API key" in driver.find_element(By.ID, "key-message").text

    driver.find_element(By.ID, "key-input").send_keys("wrong-key")
    driver.find_element(By.CSS_SELECTOR, "#key-form button[type=submit]").click()
    wait_until(driver, lambda: "refused" in driver.find_element(By.ID, "key-message").text, "refuse a wrong key")
    assert driver.execute_script("return document.getElementById('workspace').hidden")

    driver.find_element(By.ID, "key-input").send_keys(API_KEY)
    driver.find_element(By.CSS_SELECTOR, "#key-form button[type=submit]").click()
    wait_until(driver, lambda: not driver.execute_script("return document.getElementById('workspace').hidden"), "open")
    type_text(driver, "text", CHINESE)
    assert_page_shows(driver, expected_view(server, CHINESE, None, key=API_KEY), CHINESE, None)
    storage = driver.execute_script("return [sessionStorage.length, localStorage.length, document.cookie]")
    assert storage == [1, 0, ""], "the key is kept in this tab's sessionStorage only"

    driver.refresh()  # asked once: the tab keeps it
    open_page(driver, server.url + "/")
    assert not driver.execute_script("return document.getElementById('workspace').hidden")
    screenshot(driver, "with-api-key")

    driver.switch_to.new_window("tab")  # another tab does not have it
    open_page(driver, server.url + "/")
    assert driver.execute_script("return document.getElementById('workspace').hidden")
    driver.close()
    driver.switch_to.window(driver.window_handles[0])
    assert API_KEY not in Path(str(server.log_path)).read_text(errors="replace")


# -- conversation mode -----------------------------------------------------------------------------------------
CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "天气怎么样？ How is the weather? 😀"},
    {"role": "assistant", "content": "晴朗 and sunny ☀️"},
]


def edit_conversation(browser: Any, messages: list[dict[str, str]]) -> None:
    """Make the page's conversation ``messages``: add rows as needed, pick each role, type each content."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.select import Select

    while len(browser.find_elements(By.CSS_SELECTOR, "#messages .message")) > len(messages):
        browser.find_elements(By.CSS_SELECTOR, "#messages .message .remove")[-1].click()
    while len(browser.find_elements(By.CSS_SELECTOR, "#messages .message")) < len(messages):
        browser.find_element(By.ID, "add-message").click()
    rows = browser.find_elements(By.CSS_SELECTOR, "#messages .message")
    for k, (row, message) in enumerate(zip(rows, messages, strict=True)):
        Select(row.find_element(By.TAG_NAME, "select")).select_by_value(message["role"])
        browser.execute_script("arguments[0].id = arguments[1]", row.find_element(By.TAG_NAME, "textarea"), f"m{k}")
        type_text(browser, f"m{k}", message["content"])


def chat_view(server: ServerProcess, messages: list[dict[str, str]], **options: Any) -> dict[str, Any]:
    """What the page must show for a conversation: its rendered text, the tokens of that text (the encode's view,
    without added special tokens), and /chat/encode's ids and assistant masks (or its refusal)."""
    body = {"conversations": [messages], **options}
    text = post(server, wire.CHAT_RENDER_PATH, body)["texts"][0]
    plain: dict[str, Any] = {"texts": [text], "add_special_tokens": False}
    encoded = post(
        server, wire.ENCODE_PATH, {**plain, "return_offsets_mapping": True, "return_special_tokens_mask": True}
    )
    tokenized = post(server, wire.TOKENIZE_PATH, {**plain, "return_sequence_ids": True})
    view = {
        "text": text,
        "ids": encoded["input_ids"][0],
        "offsets": [tuple(o) for o in encoded["offset_mapping"][0]],
        "special": encoded["special_tokens_mask"][0],
        "tokens": tokenized["tokens"][0],
        "sequences": tokenized["sequence_ids"][0],
    }
    try:
        chat = post(server, wire.CHAT_ENCODE_PATH, {**body, "return_assistant_tokens_mask": True})
    except urllib.error.HTTPError as exc:
        view["refusal"] = json.load(exc)["error"]
        return view
    assert chat["input_ids"][0] == view["ids"]  # apply_chat_template's tokens are those of its rendered text
    view["masks"] = chat["assistant_masks"][0]
    return view


def trained(browser: Any) -> list[int]:
    return browser.execute_script(
        "return [...document.querySelectorAll('#tokens .tok[data-i]')].map(s => s.classList.contains('trains') ? 1 : 0)"
    )


def test_conversation_mode_draws_the_rendered_tokens_and_marks_those_that_train(driver, chat_servers):
    """A conversation typed into the editor: the page draws the template's rendering token by token (as the text
    mode draws a text), marks exactly the tokens /chat/encode's assistant mask marks, and counts them; on a
    template without generation markers it shows the service's refusal and the switch to "turns", which marks
    the assistant's turns."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.select import Select

    server = chat_servers["bytelevel_bpe"]
    open_page(driver, server.url + wire.PLAYGROUND_PATH)
    driver.find_element(By.ID, "mode-chat").click()
    templates = [o.get_attribute("value") for o in Select(driver.find_element(By.ID, "chat-template")).options]
    assert templates == ["default", "llama3", "rewriting", "tool_use"]
    edit_conversation(driver, CONVERSATION)
    view = chat_view(server, CONVERSATION, chat_template="default")
    assert_page_shows(driver, view, view["text"], None)
    wait_until(driver, lambda: trained(driver) == view["masks"], "mark the tokens /chat/encode marks")
    assert 0 < sum(view["masks"]) < len(view["masks"])
    stat = driver.execute_script("return document.getElementById('trains').textContent")
    assert stat == str(sum(view["masks"]))
    first = view["masks"].index(1)
    assert "yes (the assistant's)" in hover(driver, first)
    screenshot(driver, "chat-mode")

    # a template without markers: the service refuses the masks, the page says so and offers "turns"
    Select(driver.find_element(By.ID, "chat-template")).select_by_value("llama3")
    refused = chat_view(server, CONVERSATION, chat_template="llama3")
    assert "has no {% generation %} markers" in refused["refusal"]
    wait_until(
        driver,
        lambda: driver.execute_script("return document.getElementById('error').textContent") == refused["refusal"],
        "show the refusal",
    )
    assert not driver.execute_script("return document.getElementById('switch-turns-row').hidden")
    assert_page_shows_tokens_only(driver, refused)
    screenshot(driver, "chat-refusal")
    driver.find_element(By.ID, "switch-turns").click()
    turns = chat_view(server, CONVERSATION, chat_template="llama3", assistant_masks_from="turns")
    wait_until(driver, lambda: trained(driver) == turns["masks"], "mark the assistant's turns")
    assert sum(turns["masks"]) > 0
    assert driver.execute_script("return document.getElementById('switch-turns-row').hidden")

    # the generation prompt and a new user message: nothing of the prompt trains
    driver.find_element(By.ID, "generation-prompt").click()
    longer = [*CONVERSATION, {"role": "user", "content": "And tomorrow?"}]
    edit_conversation(driver, longer)
    prompted = chat_view(
        server, longer, chat_template="llama3", assistant_masks_from="turns", add_generation_prompt=True
    )
    assert_page_shows(driver, prompted, prompted["text"], None)
    wait_until(driver, lambda: trained(driver) == prompted["masks"], "mark the turns of the longer conversation")
    assert_nothing_logged_and_nothing_sent_elsewhere(driver, server, CONVERSATION[1]["content"])


def assert_page_shows_tokens_only(browser: Any, view: dict[str, Any]) -> None:
    """The rendered tokens are drawn even where the masks were refused, none marked."""
    wait_until(browser, lambda: page_ids(browser) == view["ids"], "show the rendered tokens")
    assert trained(browser) == [0] * min(len(view["ids"]), RENDER_CAP)
