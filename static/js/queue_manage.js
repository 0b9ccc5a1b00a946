// The staff queue page: one checkbox selects or clears every candidate on the page.
(function () {
  "use strict";
  document.addEventListener("DOMContentLoaded", function () {
    const all = document.getElementById("queue-select-all");
    if (!all) return;
    all.addEventListener("change", function () {
      document.querySelectorAll("#queue-actions input[name=candidate]").forEach(function (box) {
        box.checked = all.checked;
      });
    });
  });
})();
