// Keeps a session's live part current: polls its fragment and swaps it in when it
// changed (never while a form in it is being filled); and widens a picture whose
// labels are wider than the room the server gave them, so no label is clipped.
(function () {
  "use strict";
  function fitLabels(root) {
    var svgs = root.querySelectorAll("svg.lineage, svg.graph");
    Array.prototype.forEach.call(svgs, function (svg) {
      var need = Number(svg.getAttribute("width"));
      Array.prototype.forEach.call(svg.querySelectorAll("text"), function (t) {
        var box = t.getBBox();
        need = Math.max(need, Math.ceil(box.x + box.width + 6));
      });
      if (need > Number(svg.getAttribute("width"))) {
        var h = svg.getAttribute("height");
        svg.setAttribute("width", String(need));
        svg.setAttribute("viewBox", "0 0 " + need + " " + h);
      }
    });
  }
  function editing(current) {
    var active = document.activeElement;
    if (!current || !active || !current.contains(active)) { return false; }
    return ["INPUT", "SELECT", "TEXTAREA", "BUTTON"].indexOf(active.tagName) >= 0;
  }
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
        if (fresh && current && !editing(current) && fresh.dataset.version !== current.dataset.version) {
          var added = document.importNode(fresh, true);
          current.replaceWith(added);
          fitLabels(added);
        }
      })
      .catch(function () { /* the server stopped: try again later */ })
      .then(function () { window.setTimeout(poll, 1000); });
  }
  document.addEventListener("DOMContentLoaded", function () {
    fitLabels(document);
    window.setTimeout(poll, 1000);
  });
})();
