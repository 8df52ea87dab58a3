// leaserouter console: live refresh and lease countdowns. Everything works
// without it; it only adds. No request leaves the page's origin.
(function () {
  "use strict";
  var KEY = "leaserouter-console-refresh";
  var timer = null;

  function interval() {
    var v = 0;
    try { v = parseInt(localStorage.getItem(KEY) || "0", 10) || 0; } catch (e) {}
    return v;
  }

  // busy: the operator is choosing jobs or typing; a refresh would undo it.
  function busy() {
    var main = document.getElementById("main");
    if (!main) return true;
    if (main.querySelector("input[type=checkbox]:checked")) return true;
    var a = document.activeElement;
    return !!(a && main.contains(a) && /^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName));
  }

  // live is the page's URL without "exact": an exact count (seconds at
  // millions of jobs) is made once, on demand, never again at every
  // refresh; the refreshed page shows the estimates and the link again.
  function live() {
    var u = new URL(location.href);
    u.searchParams.delete("exact");
    return u.toString();
  }

  function refresh() {
    if (document.hidden || busy()) return schedule();
    fetch(live(), { headers: { "Accept": "text/html" }, credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.text(); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("main"), main = document.getElementById("main");
        if (fresh && main && !busy()) {
          main.innerHTML = fresh.innerHTML;
          var stamp = doc.querySelector("[data-testid=rendered-at]"), old = document.querySelector("[data-testid=rendered-at]");
          if (stamp && old) { old.textContent = stamp.textContent; old.title = stamp.title; }
          enhance();
        }
      })
      .catch(function () {})
      .then(schedule);
  }

  function schedule() {
    clearTimeout(timer);
    timer = null;
    var s = interval();
    if (s > 0 && !document.hidden) timer = setTimeout(refresh, s * 1000);
  }

  // human is s seconds in the words of the server's human (render.go):
  // "4.2s", "44s", "37m 44s", "2h 5m", "5d 3h".
  function human(s) {
    function two(n, big, bigName, smallName, per) {
      var b = Math.floor(n / big), rest = Math.floor((n % big) / per);
      return b + bigName + (rest > 0 ? " " + rest + smallName : "");
    }
    if (s < 10 && Math.round(s * 10) % 10 !== 0) return s.toFixed(1) + "s";
    var sec = Math.round(s);
    if (sec < 60) return sec + "s";
    if (sec < 3600) return two(sec, 60, "m", "s", 1);
    var min = Math.round(s / 60) * 60;
    if (min < 48 * 3600) return two(min, 3600, "h", "m", 60);
    return two(Math.round(s / 3600) * 3600, 86400, "d", "h", 3600);
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll("time[data-expiry]").forEach(function (t) {
      var at = Date.parse(t.getAttribute("data-expiry"));
      if (isNaN(at)) return;
      var left = (at - now) / 1000;
      t.textContent = left > 0 ? "in " + human(left) : "expired";
      t.classList.toggle("soon", left > 0 && left < 5);
      t.classList.toggle("gone", left <= 0);
    });
  }

  function enhance() {
    document.querySelectorAll("button[data-confirm]").forEach(function (b) {
      b.addEventListener("click", function (e) {
        if (!confirm(b.getAttribute("data-confirm"))) e.preventDefault();
      });
    });
    var all = document.querySelector("[data-testid=select-page]");
    if (all) {
      all.hidden = false;
      all.addEventListener("change", function () {
        document.querySelectorAll("input[data-testid=job-select]").forEach(function (c) { c.checked = all.checked; });
      });
    }
    tick();
  }

  document.addEventListener("DOMContentLoaded", function () {
    var sel = document.getElementById("refresh");
    if (sel) {
      sel.value = String(interval());
      if (sel.selectedIndex < 0) sel.value = "0";
      sel.closest("label").hidden = false;
      sel.addEventListener("change", function () {
        try { localStorage.setItem(KEY, sel.value); } catch (e) {}
        schedule();
      });
    }
    document.addEventListener("visibilitychange", schedule);
    enhance();
    setInterval(tick, 250);
    schedule();
  });
})();
