// model-router console: the only script. It refreshes the evaluation panel while an evaluation
// runs, and the page once it has ended (its scores, state and evidence are the page's, outside
// the panel: they stayed as before the run), or when the panel is gone from the answer (the
// sign-in expired: the page goes to sign in), each time at the page's own address (the panel's
// data-page); and it puts that address in the address bar of a refused action's page. It also
// disables a form's submit buttons once the form is sent: a double click sent a lifecycle
// action twice (the server takes a repeat as done, but each still asked the workflow). The
// page works without it; reload shows the same. No framework, nothing fetched from elsewhere.
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
          // The page's own address, never the current one: on a refused action's page that was
          // the action's POST-only address (a reload re-sent the action; a GET of it, a 405).
          var page = panel.getAttribute("data-page");
          if (!fresh) {
            window.location.replace(page);
            return;
          }
          panel.replaceWith(fresh);
          if (fresh.getAttribute("data-running") !== "true") {
            // Ended: the whole page again, without the "started" notice it came with.
            window.location.replace(page);
            return;
          }
          poll(fresh);
        })
        .catch(function () {
          poll(panel); // a transient failure: try again on the next tick
        });
    }, INTERVAL_MS);
  }

  // Disabled while the form is sent, not before: the submit event fires once the browser has
  // decided to send it (a form its own checks refuse is left as it was).
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (event.defaultPrevented || (form.getAttribute("method") || "").toLowerCase() !== "post") {
      return;
    }
    var found = form.querySelectorAll('button:not([type]), button[type="submit"], input[type="submit"]');
    for (var i = 0; i < found.length; i++) {
      // A named button is left as it is: the browser builds the form's data after this event,
      // and a disabled submitter's name=value would be missing from what is sent.
      if (!found[i].disabled && !found[i].hasAttribute("name")) {
        found[i].disabled = true;
        found[i].setAttribute("data-sent", "true");
      }
    }
  });

  // Back to a page the browser kept whole (the back button): the buttons this script disabled
  // are usable again; those the page itself disabled stay so.
  window.addEventListener("pageshow", function (event) {
    if (!event.persisted) {
      return;
    }
    var sent = document.querySelectorAll("[data-sent]");
    for (var i = 0; i < sent.length; i++) {
      sent[i].disabled = false;
      sent[i].removeAttribute("data-sent");
    }
  });

  document.addEventListener("DOMContentLoaded", function () {
    // A refused action's page answers the action's POST: its own address in the address bar
    // instead, so that a reload (F5) shows the page again rather than send the action again.
    var refused = document.querySelector("[data-address]");
    if (refused && window.history.replaceState) {
      window.history.replaceState(null, "", refused.getAttribute("data-address"));
    }
    var panels = document.querySelectorAll("[data-poll]");
    for (var i = 0; i < panels.length; i++) {
      poll(panels[i]);
    }
  });
})();
