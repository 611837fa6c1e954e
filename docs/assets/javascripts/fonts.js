// On a page whose text this browser draws as empty boxes (no font for Chinese or emoji: Debian's default
// install has none for Chinese), a note at the top says so and how to fix it. The finding is the playground's
// own (glyphs.js, copied from service/http/static/ when the site is built).
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const article = document.querySelector("article");
  const glyphs = window.tokenizerServiceGlyphs;
  if (!article || !glyphs) return;
  const missing = glyphs.missingIn(article.textContent);
  if (missing.length === 0) return;
  const note = document.createElement("div");
  note.className = "admonition warning missing-fonts";
  const title = document.createElement("p");
  title.className = "admonition-title";
  title.textContent = "Boxes instead of characters?";
  const text = document.createElement("p");
  text.replaceChildren(...glyphs.notice(missing, "The examples are right."));
  note.append(title, text);
  article.prepend(note);
});
