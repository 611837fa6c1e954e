// Characters this browser has no font for are drawn as empty boxes: the text is right, the machine lacks a
// font (Debian's default install has none for Chinese, and the embedded default tokenizer is Chinese). Where a
// page shows such characters, a notice says so and how to fix it. Plain JavaScript, no dependencies; used by the
// playground (service/http/static/) and by the docs site (copied there when it is built: scripts/docs_assets.py).
"use strict";

window.tokenizerServiceGlyphs = (() => {
  // For each kind of text: a pattern that finds it, and two characters of it. A missing glyph is one box for
  // every character, so when the two are drawn alike there is no font for them.
  const KINDS = [
    { name: "Chinese, Japanese and Korean characters", pattern: /[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff]/u, pair: ["天", "气"] },
    { name: "emoji", pattern: /\p{Extended_Pictographic}/u, pair: ["😀", "🚀"] },
  ];
  const FIX = "apt-get install fonts-wqy-microhei fonts-noto-color-emoji";
  const known = new Map();

  function pixels(text) {
    const canvas = document.createElement("canvas");
    canvas.width = canvas.height = 40;
    const context = canvas.getContext("2d", { willReadFrequently: true });
    context.font = "32px sans-serif";
    context.textBaseline = "top";
    context.fillText(text, 2, 2);
    return context.getImageData(0, 0, 40, 40).data;
  }

  function drawnAlike(a, b) {
    const first = pixels(a);
    const second = pixels(b);
    return first.every((value, i) => value === second[i]);
  }

  function fontMissing(kind) {
    if (!known.has(kind.name)) known.set(kind.name, drawnAlike(...kind.pair));
    return known.get(kind.name);
  }

  // The kinds of characters in `text` that this browser draws as boxes (empty when it has fonts for them all).
  function missingIn(text) {
    return KINDS.filter((kind) => kind.pattern.test(text) && fontMissing(kind)).map((kind) => kind.name);
  }

  // What a reader is told where the boxes are, as nodes to put in an element: which characters, that what is
  // shown is right (`right`: "The tokens are right."), and the fix, a command.
  function notice(missing, right) {
    const command = document.createElement("code");
    command.textContent = FIX;
    return [
      `This browser has no font for ${missing.join(" or ")}: they show as empty boxes. ${right} Install fonts ` +
        "for them (Debian, Ubuntu: ",
      command,
      "), then reload the page.",
    ];
  }

  return { missingIn, notice, FIX };
})();
