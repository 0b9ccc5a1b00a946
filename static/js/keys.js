// One-key shortcuts: an element with data-key="k" is clicked when "k" is pressed outside a
// text field. The hint (<kbd>) is part of the button's label in the template.
// "?" opens a sheet of every shortcut the page offers (base.html loads this file on every page;
// pages that also load it get one copy of the handlers).
(function () {
  "use strict";
  if (window.specvetKeys) return;
  window.specvetKeys = true;

  function typingIn(target) {
    if (!target || !target.closest) return false;
    if (target.isContentEditable) return true;
    const field = target.closest("input, textarea, select");
    if (!field) return false;
    const kind = (field.getAttribute("type") || "text").toLowerCase();
    // Buttons, radios and checkboxes take no text: shortcuts still apply while they have focus.
    return !["button", "submit", "reset", "radio", "checkbox"].includes(kind);
  }

  function visible(node) {
    return !!(node.offsetWidth || node.offsetHeight || node.getClientRects().length);
  }

  function target(key) {
    const nodes = document.querySelectorAll("[data-key]");
    for (const node of nodes) {
      if (node.dataset.key.toLowerCase() !== key) continue;
      if (node.disabled || node.getAttribute("aria-disabled") === "true") continue;
      if (visible(node)) return node;
    }
    return null;
  }

  const KEY_NAMES = { ArrowLeft: "←", ArrowRight: "→", ArrowUp: "↑", ArrowDown: "↓", Escape: "Esc" };

  function label(node) {
    const copy = node.cloneNode(true);
    copy.querySelectorAll("kbd").forEach(function (kbd) { kbd.remove(); });
    const text = (copy.textContent || "").replace(/\s+/g, " ").trim();
    return text || node.getAttribute("title") || node.getAttribute("aria-label") || "";
  }

  // What this page answers to: its data-key elements, aria-keyshortcuts, and data-key-help
  // entries ("key|what it does") for keys a script handles itself (the viewer, rating pages).
  function shortcuts() {
    const rows = [["?", "show or hide this sheet"], ["Esc", "close it"]];
    const seen = new Set(rows.map(function (row) { return row[0]; }));
    function add(key, what) {
      const shown = KEY_NAMES[key] || (key.length === 1 ? key.toUpperCase() : key);
      if (!what || seen.has(shown + what)) return;
      seen.add(shown + what);
      rows.push([shown, what]);
    }
    document.querySelectorAll("[data-key]").forEach(function (node) {
      if (visible(node)) add(node.dataset.key, label(node));
    });
    document.querySelectorAll("[aria-keyshortcuts]").forEach(function (node) {
      if (visible(node)) add(node.getAttribute("aria-keyshortcuts"), label(node));
    });
    document.querySelectorAll("[data-key-help]").forEach(function (node) {
      node.dataset.keyHelp.split(";").forEach(function (entry) {
        const parts = entry.split("|");
        if (parts.length === 2) add(parts[0].trim(), parts[1].trim());
      });
    });
    return rows;
  }

  function toggleSheet() {
    let sheet = document.getElementById("key-sheet");
    if (sheet && sheet.open) { sheet.close(); return; }
    if (!sheet) {
      sheet = document.createElement("dialog");
      sheet.id = "key-sheet";
      sheet.className = "key-sheet card";
      sheet.setAttribute("aria-label", "Keyboard shortcuts");
      document.body.appendChild(sheet);
    }
    const title = document.createElement("h2");
    title.textContent = "Keyboard shortcuts";
    const table = document.createElement("table");
    table.className = "table";
    shortcuts().forEach(function (row) {
      const tr = document.createElement("tr");
      const key = document.createElement("td");
      const kbd = document.createElement("kbd");
      kbd.textContent = row[0];
      key.appendChild(kbd);
      const what = document.createElement("td");
      what.textContent = row[1];
      tr.append(key, what);
      table.appendChild(tr);
    });
    const note = document.createElement("p");
    note.className = "muted small";
    note.textContent = "Keys act outside text fields; Esc closes this sheet.";
    sheet.replaceChildren(title, table, note);
    sheet.showModal();
  }

  document.addEventListener("keydown", function (event) {
    if (event.defaultPrevented || event.repeat) return;
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (typingIn(event.target)) return;
    // Rating pages answer "?" with their rubric (rating.js), which lists their keys.
    if (event.key === "?" && !document.getElementById("rubric-panel")) {
      event.preventDefault();
      toggleSheet();
      return;
    }
    if (!event.key || event.key.length !== 1) return;
    const node = target(event.key.toLowerCase());
    if (!node) return;
    event.preventDefault();
    node.focus();
    node.click();
  });
})();
