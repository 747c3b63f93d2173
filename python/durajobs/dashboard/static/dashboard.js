// durajobs dashboard: auto-refresh a user can pause, and confirmations for actions.
// Loaded as a file (the Content-Security-Policy allows no inline script).
(function () {
  "use strict";
  var KEY = "durajobs.refresh.paused";
  var body = document.body;
  var seconds = parseInt(body.getAttribute("data-refresh") || "0", 10);
  var toggle = document.getElementById("refresh-toggle");
  var timer = null;

  function paused() {
    try { return window.localStorage.getItem(KEY) === "1"; } catch (e) { return false; }
  }
  function show() {
    if (!toggle) { return; }
    toggle.textContent = paused() ? "Resume refresh" : "Pause refresh";
    toggle.setAttribute("aria-pressed", paused() ? "true" : "false");
  }
  function schedule() {
    if (timer) { window.clearTimeout(timer); timer = null; }
    if (seconds > 0 && !paused()) {
      timer = window.setTimeout(function () {
        // a form being filled in is not thrown away
        var active = document.activeElement;
        if (active && (active.tagName === "INPUT" || active.tagName === "SELECT")) { schedule(); return; }
        window.location.reload();
      }, seconds * 1000);
    }
  }
  if (toggle) {
    toggle.addEventListener("click", function () {
      try { window.localStorage.setItem(KEY, paused() ? "0" : "1"); } catch (e) { /* private mode */ }
      show();
      schedule();
    });
  }
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (!window.confirm(form.getAttribute("data-confirm"))) { event.preventDefault(); }
    });
  });
  show();
  schedule();
})();
