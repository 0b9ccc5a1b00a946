// Forms with a policy choice (new inspection run, evaluation): each policy's own fields
// (checkpoint, model path, endpoint) are shown only while that policy is chosen.
(function () {
  "use strict";

  function wire(select) {
    const form = select.form;
    function sync() {
      form.querySelectorAll("[data-policy]").forEach(function (input) {
        const box = input.closest(".field") || input;
        box.hidden = input.dataset.policy !== select.value;
      });
    }
    select.addEventListener("change", sync);
    sync();
  }

  function init() {
    document.querySelectorAll("form select[name=policy]").forEach(wire);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
