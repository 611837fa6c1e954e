// The tokenizer playground. Plain JavaScript, no dependencies, no build step.
//
// It talks to the service that served it and to nothing else (the page's Content-Security-Policy allows no
// other origin), and it logs nothing: texts never reach the console, storage or any third party. The API
// key, when the service asks for one, is kept in sessionStorage: this tab only.
//
// Offsets: the service counts characters as Python does (Unicode code points); JavaScript strings count
// UTF-16 code units, where a character beyond U+FFFF (most emoji) takes two. Every offset goes through
// codePointIndex() before it slices a string.
"use strict";

(() => {
  const config = JSON.parse(document.getElementById("config").textContent);
  const $ = (id) => document.getElementById(id);
  const PALETTE = 6; // classes c0..c5 in style.css
  const INVISIBLE = /^[\s\u00ad\u180e\u200b-\u200f\u2060-\u2064\ufeff]+$/;

  const ROLES = ["system", "user", "assistant", "tool"];
  const FIRST_CONVERSATION = [
    ["system", "You are a concise assistant."],
    ["user", "What is the capital of France? 用一个词回答。"],
    ["assistant", "Paris. 巴黎 🇫🇷"],
  ];

  const state = {
    info: null,
    mode: "text", // or "chat": a conversation through the tokenizer's chat template
    trains: null, // in chat mode, per token: 1 when it counts toward the loss (assistant_masks), else null
    generation: 0, // the newest request; older answers are dropped
    controller: null, // aborts the request in flight when a newer one starts
    timer: 0,
    memoryKey: null, // when sessionStorage is unavailable
    tokens: [], // per rendered token: what the tooltip shows
  };

  // -- the API key: this tab only ---------------------------------------------------------------------------
  function getKey() {
    try {
      return window.sessionStorage.getItem(config.key_storage);
    } catch (_) {
      return state.memoryKey;
    }
  }

  function setKey(key) {
    state.memoryKey = key;
    try {
      if (key === null) window.sessionStorage.removeItem(config.key_storage);
      else window.sessionStorage.setItem(config.key_storage, key);
    } catch (_) {
      // storage disabled: the key lives in this page only
    }
  }

  // -- calling the service ----------------------------------------------------------------------------------
  class ApiError extends Error {
    constructor(status, message, kind) {
      super(message);
      this.status = status;
      this.kind = kind;
    }
  }

  async function call(method, path, body, signal) {
    const headers = { Accept: "application/json" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const key = getKey();
    if (key) headers.Authorization = `${config.auth_scheme} ${key}`;
    const response = await fetch(new URL(path, document.baseURI), {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
      cache: "no-store",
      credentials: "omit",
      referrerPolicy: "no-referrer",
    });
    let payload = null;
    try {
      payload = await response.json();
    } catch (_) {
      payload = null;
    }
    if (!response.ok) {
      const message = (payload && payload[config.error_field]) || `HTTP ${response.status} ${response.statusText}`;
      throw new ApiError(response.status, message, payload && payload[config.error_type_field]);
    }
    return { payload, fingerprint: response.headers.get(config.fingerprint_header) };
  }

  // -- start: /info, or the key form --------------------------------------------------------------------------
  async function boot() {
    try {
      const { payload } = await call("GET", config.paths.info);
      showInfo(payload);
      $("key-form").hidden = true;
      $("workspace").hidden = false;
      $("forget-key").hidden = !getKey();
      schedule(0);
    } catch (error) {
      if (error.status === 401) {
        askForKey(getKey() ? "The service refused this API key; enter the right one." : "This service needs an API key.");
      } else {
        askForNothing(error);
      }
    }
  }

  function askForKey(message) {
    setKey(null);
    state.info = null;
    $("workspace").hidden = true;
    $("key-message").textContent = message;
    $("key-form").hidden = false;
    $("key-input").value = "";
    $("key-input").focus();
  }

  function askForNothing(error) {
    $("workspace").hidden = false;
    showError(`Could not reach the service: ${error.message}`);
  }

  function showInfo(info) {
    state.info = info;
    const big = (n) => (typeof n === "number" && n < 1e12 ? n.toLocaleString("en") : "none");
    $("info-source").textContent = info.source;
    $("info-revision").textContent = info.revision || "–";
    $("info-class").textContent = info.tokenizer_class;
    $("info-vocab").textContent = big(info.vocab_size);
    $("info-max-length").textContent = big(info.model_max_length);
    $("info-fingerprint").textContent = info.fingerprint;
    $("info-fingerprint").title = "X-Tokenizer-Fingerprint: pin it in training clients";
    if (typeof info.model_max_length === "number" && info.model_max_length < 1e12) {
      $("max-length").placeholder = String(info.model_max_length);
    }
    const limits = info.limits || {};
    $("limits").textContent = limits.max_text_chars
      ? `This service takes texts of up to ${limits.max_text_chars.toLocaleString("en")} characters.`
      : "";
    $("info-link").hidden = Boolean(info.auth); // a browser tab cannot send the key when it opens a link
    $("docs-link").hidden = !config.paths.docs || Boolean(info.auth);
    showTemplates(info.chat || { chat_template: false, chat_template_names: [], generation_markers: {} });
  }

  // The tokenizer's chat templates: its named ones (the default first), or its one unnamed template ("").
  function showTemplates(chat) {
    const select = $("chat-template");
    const names = chat.chat_template_names.length ? chat.chat_template_names : chat.chat_template ? [""] : [];
    const ordered = names.includes("default") ? ["default", ...names.filter((n) => n !== "default")] : names;
    select.replaceChildren(
      ...ordered.map((name) => {
        const option = document.createElement("option");
        option.value = name;
        const markers = chat.generation_markers[name] ? "" : " (no generation markers)";
        option.textContent = (name || "the tokenizer's template") + markers;
        return option;
      }),
    );
    $("no-template").hidden = Boolean(chat.chat_template);
    $("messages").hidden = $("add-message").disabled = !chat.chat_template;
  }

  // -- encoding as the user types -----------------------------------------------------------------------------
  function schedule(delay) {
    window.clearTimeout(state.timer);
    state.timer = window.setTimeout(run, delay);
  }

  function options() {
    const truncation = $("truncation").value;
    const maxLength = $("max-length").value.trim();
    const chosen = { add_special_tokens: $("add-special-tokens").checked };
    if (truncation) {
      chosen.truncation = truncation;
      if (maxLength !== "") chosen.max_length = Number(maxLength);
    }
    return chosen;
  }

  async function run() {
    if (!state.info) return;
    if (state.mode === "chat") {
      await runChat();
      return;
    }
    state.trains = null;
    const text = $("text").value;
    const pair = $("pair-on").checked ? $("pair").value : null;
    const chosen = options();
    if (chosen.max_length !== undefined && !(Number.isInteger(chosen.max_length) && chosen.max_length >= 0)) {
      showError("max_length must be a whole number, 0 or more.");
      return;
    }
    const texts = { texts: [text] };
    if (pair !== null) texts.text_pairs = [pair];

    if (state.controller) state.controller.abort();
    const controller = new AbortController();
    state.controller = controller;
    const generation = ++state.generation;
    $("status").textContent = "encoding…";
    try {
      const [encoded, tokenized] = await Promise.all([
        call(
          "POST",
          config.paths.encode,
          { ...texts, ...chosen, return_offsets_mapping: true, return_special_tokens_mask: true },
          controller.signal,
        ),
        call("POST", config.paths.tokenize, { ...texts, ...chosen, return_sequence_ids: true }, controller.signal),
      ]);
      if (generation !== state.generation) return;
      render(text, pair, encoded, tokenized);
    } catch (error) {
      showFailure(error, generation);
    }
  }

  // A call of the drawing generation that failed: nothing if a later generation superseded it (or aborted
  // it), the key asked for again if the service refused it, else the error. True when the error is shown.
  function showFailure(error, generation) {
    if (generation !== state.generation || error.name === "AbortError") return false;
    if (error.status === 401) {
      askForKey("The service refused the API key; enter the right one.");
      return false;
    }
    $("status").textContent = "";
    showError(error instanceof ApiError ? error.message : `Could not reach the service: ${error.message}`);
    return true;
  }

  // -- conversations: rendered by the chat template, each token drawn, the ones that train marked ---------------
  function conversation() {
    return [...$("messages").children].map((row) => ({
      role: row.querySelector("select").value,
      content: row.querySelector("textarea").value,
    }));
  }

  async function runChat() {
    const messages = conversation();
    if (!state.info.chat || !state.info.chat.chat_template) return;
    if (messages.length === 0) {
      showError("Add a message: a conversation needs at least one.");
      return;
    }
    const template = $("chat-template").value;
    const rendering = { conversations: [messages], add_generation_prompt: $("generation-prompt").checked };
    if (template) rendering.chat_template = template;
    const masked = { ...rendering, return_assistant_tokens_mask: true, assistant_masks_from: $("masks-from").value };

    if (state.controller) state.controller.abort();
    const controller = new AbortController();
    state.controller = controller;
    const generation = ++state.generation;
    $("status").textContent = "rendering…";
    try {
      const rendered = await call("POST", config.paths.chat_render, rendering, controller.signal);
      const text = rendered.payload.texts[0];
      // the tokens of the rendered text: apply_chat_template encodes it without adding special tokens
      const plain = { texts: [text], add_special_tokens: false };
      const [encoded, tokenized, chat] = await Promise.all([
        call(
          "POST",
          config.paths.encode,
          { ...plain, return_offsets_mapping: true, return_special_tokens_mask: true },
          controller.signal,
        ),
        call("POST", config.paths.tokenize, { ...plain, return_sequence_ids: true }, controller.signal),
        call("POST", config.paths.chat_encode, masked, controller.signal).catch((error) => error),
      ]);
      if (generation !== state.generation) return;
      const refused = chat instanceof Error ? chat : null;
      if (refused && !(refused instanceof ApiError)) throw refused;
      const ids = encoded.payload.input_ids[0];
      state.trains = refused ? null : chat.payload.assistant_masks[0];
      if (!refused && chat.payload.input_ids[0].join() !== ids.join()) {
        showError("/chat/encode and /encode of the rendered text disagree; reload the page.");
        return;
      }
      render(text, null, encoded, tokenized);
      showTrains(refused, template);
    } catch (error) {
      if (showFailure(error, generation)) $("tokens").replaceChildren(); // no stale conversation under its error
    }
  }

  // Marks the drawn tokens that train; or shows why the service refused the masks (and the way out).
  function showTrains(refused, template) {
    const markers = (state.info.chat.generation_markers || {})[template];
    $("switch-turns-row").hidden = !(refused && markers === false && $("masks-from").value === "generation");
    $("trains-stat").hidden = $("legend-trains").hidden = Boolean(refused);
    if (refused) {
      showError(refused.message);
      return;
    }
    let count = 0;
    for (const span of $("tokens").querySelectorAll(".tok[data-i]")) {
      const trains = state.trains[Number(span.dataset.i)] === 1;
      span.classList.toggle("trains", trains);
    }
    for (const bit of state.trains) count += bit;
    $("trains").textContent = count.toLocaleString("en");
  }

  function addMessage(role, content) {
    const row = document.createElement("div");
    row.className = "message";
    const select = document.createElement("select");
    select.setAttribute("aria-label", "role");
    for (const name of ROLES) {
      const option = document.createElement("option");
      option.value = option.textContent = name;
      select.append(option);
    }
    select.value = role;
    const box = document.createElement("textarea");
    box.rows = 2;
    box.spellcheck = false;
    box.value = content;
    box.setAttribute("aria-label", "content");
    const remove = document.createElement("button");
    remove.type = "button";
    remove.className = "link remove";
    remove.textContent = "remove";
    select.addEventListener("change", () => schedule(0));
    box.addEventListener("input", () => schedule(config.debounce_ms));
    remove.addEventListener("click", () => {
      row.remove();
      schedule(0);
    });
    row.append(select, box, remove);
    $("messages").append(row);
  }

  function setMode(mode) {
    state.mode = mode;
    $("text-inputs").hidden = mode !== "text";
    $("chat-inputs").hidden = mode !== "chat";
    $("switch-turns-row").hidden = true;
    $("trains-stat").hidden = $("legend-trains").hidden = true;
    $("error").hidden = true;
    schedule(0);
  }

  function showError(message) {
    $("error").textContent = message;
    $("error").hidden = false;
  }

  // -- drawing the tokens ---------------------------------------------------------------------------------------
  // index[c] = the UTF-16 position of code point c (index[length] = the string's UTF-16 length).
  function codePointIndex(s) {
    const index = new Uint32Array(s.length + 1);
    let c = 0;
    for (let u = 0; u < s.length; u++) {
      index[c++] = u;
      const unit = s.charCodeAt(u);
      if (unit >= 0xd800 && unit <= 0xdbff && u + 1 < s.length) {
        const next = s.charCodeAt(u + 1);
        if (next >= 0xdc00 && next <= 0xdfff) u++; // a surrogate pair is one character
      }
    }
    index[c] = s.length;
    return index.subarray(0, c + 1);
  }

  function render(text, pair, encoded, tokenized) {
    const e = encoded.payload;
    const ids = e.input_ids[0];
    const offsets = e.offset_mapping[0];
    const special = e.special_tokens_mask[0];
    const strings = tokenized.payload.tokens[0];
    const sequences = tokenized.payload.sequence_ids[0];
    $("error").hidden = true;
    if (strings.length !== ids.length || sequences.length !== ids.length) {
      showError(`The service answered ${ids.length} ids but ${strings.length} tokens; reload the page.`);
      return;
    }
    const fingerprints = new Set([encoded.fingerprint, tokenized.fingerprint, state.info.fingerprint]);
    $("warning").hidden = fingerprints.size === 1;
    $("warning").textContent =
      fingerprints.size === 1
        ? ""
        : "The service now serves another tokenizer than when this page loaded (its fingerprint changed): reload the page.";

    const sources = [text, pair === null ? "" : pair];
    const indexes = [codePointIndex(sources[0]), codePointIndex(sources[1])];
    const slice = (seq, start, end) => {
      const index = indexes[seq];
      const last = index.length - 1;
      return sources[seq].slice(index[Math.min(start, last)], index[Math.min(end, last)]);
    };

    const drawn = Math.min(ids.length, config.render_cap);
    const lastOf = [-1, -1]; // the last token of each sequence: its leftover text follows it (if it is drawn)
    for (let i = 0; i < ids.length; i++) if (sequences[i] === 0 || sequences[i] === 1) lastOf[sequences[i]] = i;

    const out = document.createDocumentFragment();
    const shown = [0, 0]; // per sequence: the code points drawn so far
    let current = -1; // the sequence whose text is being drawn
    state.tokens = new Array(drawn);
    for (let i = 0; i < drawn; i++) {
      const seq = sequences[i];
      const span = document.createElement("span");
      span.dataset.i = String(i);
      span.dataset.id = String(ids[i]);
      span.dataset.start = String(offsets[i][0]);
      span.dataset.end = String(offsets[i][1]);
      const info = { i, id: ids[i], token: strings[i], special: Boolean(special[i]), seq, covers: "" };
      if (seq !== 0 && seq !== 1) {
        // added by the tokenizer's template ([CLS], </s>...): no characters of its own
        span.className = "tok special";
        span.textContent = strings[i];
      } else {
        if (seq !== current) {
          if (current !== -1) out.append(document.createElement("br"));
          if (seq === 1) out.append(label("pair"));
          current = seq;
        }
        const [start, end] = offsets[i];
        if (start > shown[seq]) out.append(gap(slice(seq, shown[seq], start)));
        const from = Math.max(start, shown[seq]);
        span.className = `tok c${i % PALETTE}${special[i] ? " special-text" : ""}`;
        span.dataset.seq = String(seq);
        info.covers = slice(seq, start, end);
        if (end > from) {
          span.textContent = slice(seq, from, end);
          if (INVISIBLE.test(span.textContent)) span.classList.add("ws"); // spaces, joiners: outlined
          if (span.textContent.includes("\n")) span.classList.add("nl");
        } else {
          span.classList.add("shared"); // its characters are drawn already: a token of the same character
        }
        shown[seq] = Math.max(shown[seq], end);
      }
      out.append(span);
      if (i === lastOf[seq]) {
        const rest = slice(seq, shown[seq], indexes[seq].length - 1);
        if (rest) out.append(gap(rest));
        shown[seq] = indexes[seq].length - 1;
      }
      state.tokens[i] = info;
    }
    if (drawn === ids.length) {
      // a text with no token at all (e.g. all cut by truncation), drawn after the tokens
      for (const seq of [0, 1]) {
        if (lastOf[seq] === -1 && sources[seq]) {
          out.append(document.createElement("br"));
          if (seq === 1) out.append(label("pair"));
          out.append(gap(sources[seq]));
        }
      }
    }
    $("tokens").replaceChildren(out);
    hideTooltip();

    const characters = indexes[0].length - 1 + (pair === null ? 0 : indexes[1].length - 1);
    const textTokens = special.reduce((n, s) => n + (s ? 0 : 1), 0);
    $("count").textContent = ids.length.toLocaleString("en");
    $("chars").textContent = characters.toLocaleString("en");
    $("chars-per-token").textContent = textTokens ? (characters / textTokens).toFixed(2) : "–";
    $("cap").hidden = drawn === ids.length;
    $("cap").textContent =
      drawn === ids.length
        ? ""
        : `Showing the first ${drawn.toLocaleString("en")} of ${ids.length.toLocaleString("en")} tokens ` +
          "(and the text they cover); the count and the id list are complete.";
    $("ids").value = `[${ids.join(", ")}]`;
    $("status").textContent = "";
    showMissingFonts(text + (pair === null ? "" : pair));
  }

  // Characters drawn as boxes (no font on this machine): say so where the boxes are, with the fix.
  function showMissingFonts(text) {
    const glyphs = window.tokenizerServiceGlyphs;
    const missing = glyphs.missingIn(text);
    $("fonts").hidden = missing.length === 0;
    $("fonts").replaceChildren(...(missing.length ? glyphs.notice(missing, "The tokens are right.") : []));
  }

  function gap(text) {
    const span = document.createElement("span");
    span.className = "gap";
    span.textContent = text;
    return span;
  }

  function label(text) {
    const span = document.createElement("span");
    span.className = "seq-label";
    span.textContent = text;
    return span;
  }

  // -- the tooltip: one element, placed over the hovered token -------------------------------------------------
  // Invisible characters shown as escapes, so a token of spaces, a newline or a joiner can be read.
  function visible(s) {
    return s.replace(/[\u0000-\u001f\u007f-\u009f\u00ad\u200b-\u200f\u2028-\u202e\u2060-\u2064\ufeff]/g, (c) => {
      const named = { "\n": "\\n", "\t": "\\t", "\r": "\\r" }[c];
      return named || `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`;
    });
  }

  function showTooltip(span) {
    const info = state.tokens[Number(span.dataset.i)];
    if (!info) return;
    const tip = $("tooltip");
    const lines = [
      [`#${info.i}`, `id ${info.id}`],
      ["token", JSON.stringify(visible(info.token)).slice(1, -1)],
    ];
    if (info.special) lines.push(["special", "yes"]);
    else lines.push([`characters ${span.dataset.start}–${span.dataset.end}`, visible(info.covers)]);
    if (span.classList.contains("shared")) lines.push(["shared", "its characters are drawn with the token before"]);
    if (state.trains) lines.push(["trains", state.trains[info.i] === 1 ? "yes (the assistant's)" : "no"]);
    tip.replaceChildren(
      ...lines.map(([key, value]) => {
        const row = document.createElement("div");
        const k = document.createElement("span");
        k.className = "key";
        k.textContent = key;
        const v = document.createElement("span");
        v.className = "value";
        v.textContent = value;
        row.append(k, v);
        return row;
      }),
    );
    tip.dataset.i = String(info.i);
    tip.hidden = false;
    const wrap = tip.parentElement.getBoundingClientRect();
    const box = span.getBoundingClientRect();
    const left = Math.max(0, Math.min(box.left - wrap.left, wrap.width - tip.offsetWidth));
    tip.style.left = `${left}px`;
    tip.style.top = `${box.bottom - wrap.top + 4}px`;
  }

  function hideTooltip() {
    $("tooltip").hidden = true;
  }

  // -- wiring ------------------------------------------------------------------------------------------------
  function wire() {
    if (config.paths.docs) $("docs-link").href = config.paths.docs;
    $("info-link").href = config.paths.info;
    $("text").addEventListener("input", () => schedule(config.debounce_ms));
    $("pair").addEventListener("input", () => schedule(config.debounce_ms));
    $("pair-on").addEventListener("change", () => {
      $("pair").hidden = !$("pair-on").checked;
      schedule(0);
    });
    $("add-special-tokens").addEventListener("change", () => schedule(0));
    $("truncation").addEventListener("change", () => {
      $("max-length").disabled = !$("truncation").value;
      schedule(0);
    });
    $("max-length").addEventListener("input", () => schedule(config.debounce_ms));
    $("tokens").addEventListener("mouseover", (event) => {
      const span = event.target.closest(".tok");
      if (span) showTooltip(span);
    });
    $("tokens").addEventListener("mouseleave", hideTooltip);
    $("copy-ids").addEventListener("click", copyIds);
    for (const radio of document.querySelectorAll('input[name="mode"]')) {
      radio.addEventListener("change", () => radio.checked && setMode(radio.value));
    }
    for (const [role, content] of FIRST_CONVERSATION) addMessage(role, content);
    $("add-message").addEventListener("click", () => {
      const last = conversation().at(-1);
      addMessage(last && last.role === "user" ? "assistant" : "user", "");
      schedule(0);
    });
    for (const id of ["chat-template", "generation-prompt", "masks-from"]) $(id).addEventListener("change", () => schedule(0));
    $("switch-turns").addEventListener("click", () => {
      $("masks-from").value = "turns";
      schedule(0);
    });
    $("forget-key").addEventListener("click", () => askForKey("Enter an API key."));
    $("key-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const key = $("key-input").value.trim();
      if (!key) return;
      setKey(key);
      boot();
    });
  }

  async function copyIds() {
    const ids = $("ids");
    try {
      await navigator.clipboard.writeText(ids.value);
    } catch (_) {
      ids.select(); // no clipboard API (plain http on another host): the old way
      document.execCommand("copy");
    }
    $("copied").textContent = "copied";
    window.setTimeout(() => {
      $("copied").textContent = "";
    }, 1500);
  }

  wire();
  boot();
})();
