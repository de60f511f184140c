// idemctl console: the only script the pages load (the CSP forbids inline
// script). It does two things and nothing else:
//  - on a page whose <body> has data-refresh="N", it re-fetches the page
//    every N seconds and swaps each element marked data-live (by id), so
//    the overview stays current without a full reload;
//  - a button with data-copy="ID" copies that element's text.
"use strict";
(function () {
  function refresh(period) {
    var busy = false;
    function tick() {
      if (busy || document.hidden) return;
      busy = true;
      fetch(location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (resp) {
          // Signed out, or the server is gone: stop, keep what is shown.
          if (!resp.ok || resp.redirected) throw new Error("stop");
          return resp.text();
        })
        .then(function (html) {
          var doc = new DOMParser().parseFromString(html, "text/html");
          document.querySelectorAll("[data-live]").forEach(function (el) {
            var fresh = doc.getElementById(el.id);
            if (fresh) el.replaceWith(document.importNode(fresh, true));
          });
          document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
        })
        .catch(function () { clearInterval(timer); })
        .finally(function () { busy = false; });
    }
    var timer = setInterval(tick, period * 1000);
  }

  function copy(btn) {
    var el = document.getElementById(btn.dataset.copy);
    if (!el) return;
    var text = el.textContent;
    var done = function () {
      btn.textContent = "Copied";
      setTimeout(function () { btn.textContent = "Copy"; }, 1500);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () { select(el); });
    } else {
      select(el);
    }
  }

  // select leaves the text selected for Ctrl-C where the clipboard API is
  // not available (a non-TLS, non-loopback address).
  function select(el) {
    var range = document.createRange();
    range.selectNodeContents(el);
    var sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var period = Number(document.body.dataset.refresh);
    if (period > 0) refresh(period);
    document.querySelectorAll("button[data-copy]").forEach(function (btn) {
      btn.addEventListener("click", function () { copy(btn); });
    });
  });
})();
