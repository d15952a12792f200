// vaultgate review page: the only script. Every decision works without it (plain forms); this
// adds live inbox updates, copy buttons and submitting the vault switcher on change.
"use strict";
(function () {
  const rows = document.getElementById("inbox-rows");
  if (rows && rows.dataset.src) {
    let last = rows.innerHTML;
    setInterval(async () => {
      try {
        const r = await fetch(rows.dataset.src, { credentials: "same-origin", cache: "no-store" });
        if (!r.ok) return;
        const html = await r.text();
        if (html !== last) {
          rows.innerHTML = html;
          last = html;
          const empty = document.getElementById("inbox-empty");
          if (empty) empty.hidden = rows.children.length > 0;
        }
      } catch (_) { /* the next poll tries again */ }
    }, 2000);
  }
  for (const b of document.querySelectorAll("button.copy")) {
    b.hidden = false;
    b.addEventListener("click", async () => {
      const el = document.getElementById(b.dataset.copy);
      if (!el) return;
      try {
        await navigator.clipboard.writeText(el.textContent);
        b.textContent = "Copied";
      } catch (_) {
        const range = document.createRange();
        range.selectNodeContents(el);
        const sel = window.getSelection();
        sel.removeAllRanges();
        sel.addRange(range);
        b.textContent = "Selected: press Ctrl-C";
      }
    });
  }
  const sw = document.getElementById("vault-switch");
  if (sw && sw.form) {
    sw.addEventListener("change", () => sw.form.submit());
  }
})();
