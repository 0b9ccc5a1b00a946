// Revision editor: autosave every ~5 s while there are unsaved changes, show refused saves
// (400/403/409 come back with the editor and its message), and warn before submitting
// a version while newer edits are unsaved. No inline scripts: this file is all the glue.
(function () {
  "use strict";

  const AUTOSAVE_MS = 5000;
  let dirty = false;
  let unsavedSinceVersion = false;

  function editorForm() {
    return document.querySelector("form[data-editor]");
  }

  function markDirty(event) {
    if (event.target && event.target.closest && event.target.closest("form[data-editor]")) {
      dirty = true;
      unsavedSinceVersion = true;
    }
  }

  function autosave() {
    if (!dirty || !window.htmx) return;
    const status = document.getElementById("autosave-status");
    if (!status || !editorForm()) return;
    dirty = false;
    window.htmx.trigger(status, "autosave");
  }

  document.addEventListener("input", markDirty);
  document.addEventListener("change", markDirty);
  window.setInterval(autosave, AUTOSAVE_MS);

  document.addEventListener("submit", function (event) {
    const form = event.target;
    if (form.matches && form.matches("form[data-editor]")) {
      dirty = false;  // a save or a step change posts everything; nothing to autosave
      return;
    }
    if (form.dataset && form.dataset.confirmUnsaved && unsavedSinceVersion) {
      if (!window.confirm(form.dataset.confirmUnsaved)) event.preventDefault();
    }
  }, true);

  document.addEventListener("htmx:beforeSwap", function (event) {
    const status = event.detail.xhr ? event.detail.xhr.status : 0;
    // A refused save answers with the editor holding the user's text and the reason.
    if (status === 400 || status === 403 || status === 409) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });

  document.addEventListener("htmx:afterSwap", function (event) {
    const alert = event.detail.target && event.detail.target.querySelector
      ? event.detail.target.querySelector("[role=alert]") : null;
    if (alert && alert.scrollIntoView) alert.scrollIntoView({ block: "center" });
  });
})();
