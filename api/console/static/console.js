// model-router console: the only script. It refreshes the evaluation panel while an evaluation
// runs, and the page once it has ended (its scores, state and evidence are the page's, outside
// the panel: they stayed as before the run), or when the panel is gone from the answer (the
// sign-in expired: the page goes to sign in). The page works without it; reload shows the
// same. No framework, nothing fetched from elsewhere.
(function () {
  "use strict";
  var INTERVAL_MS = 1000;

  function poll(panel) {
    if (panel.getAttribute("data-running") !== "true") {
      return;
    }
    var url = panel.getAttribute("data-poll");
    window.setTimeout(function () {
      fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } })
        .then(function (response) {
          if (!response.ok) {
            throw new Error("status " + response.status);
          }
          return response.text();
        })
        .then(function (html) {
          var doc = new DOMParser().parseFromString(html, "text/html");
          var fresh = doc.getElementById(panel.id);
          if (!fresh) {
            window.location.reload();
            return;
          }
          panel.replaceWith(fresh);
          if (fresh.getAttribute("data-running") !== "true") {
            // Ended: the whole page again, without the "started" notice it came with.
            var page = new URL(window.location.href);
            page.searchParams.delete("done");
            window.location.replace(page.toString());
            return;
          }
          poll(fresh);
        })
        .catch(function () {
          poll(panel); // a transient failure: try again on the next tick
        });
    }, INTERVAL_MS);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var panels = document.querySelectorAll("[data-poll]");
    for (var i = 0; i < panels.length; i++) {
      poll(panels[i]);
    }
  });
})();
