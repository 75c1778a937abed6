// Keeps a session's lineage current: polls its fragment and swaps it in when it changed.
(function () {
  "use strict";
  function poll() {
    var live = document.getElementById("live");
    if (!live) { return; }
    var url = live.dataset.live + "?v=" + encodeURIComponent(live.dataset.version);
    fetch(url, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.status === 200 ? r.text() : null; })
      .then(function (html) {
        if (html === null) { return; }
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("live");
        var current = document.getElementById("live");
        var editing = current && current.contains(document.activeElement) &&
          document.activeElement.tagName === "INPUT";
        if (fresh && current && !editing && fresh.dataset.version !== current.dataset.version) {
          current.replaceWith(document.importNode(fresh, true));
        }
      })
      .catch(function () { /* the server stopped: try again later */ })
      .then(function () { window.setTimeout(poll, 1000); });
  }
  document.addEventListener("DOMContentLoaded", function () { window.setTimeout(poll, 1000); });
})();
