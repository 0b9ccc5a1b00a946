// One-key shortcuts: an element with data-key="k" is clicked when "k" is pressed outside a
// text field. The hint (<kbd>) is part of the button's label in the template.
(function () {
  "use strict";

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

  document.addEventListener("keydown", function (event) {
    if (event.defaultPrevented || event.repeat) return;
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (typingIn(event.target)) return;
    if (!event.key || event.key.length !== 1) return;
    const node = target(event.key.toLowerCase());
    if (!node) return;
    event.preventDefault();
    node.focus();
    node.click();
  });
})();
