// Sidewisp page behaviour. No inline scripts: the CSP forbids them.
//
// The header shows two separate facts: #live-status is this page's live updates
// (socket connected or not; "paused" while the server cannot reach its channel
// layer), #system-marker is the server's word on workers and beat.
//
// 1. Times: every <time datetime> gets the viewer's own zone next to the UTC
//    time, relative times are kept fresh, and wait countdowns tick each second.
// 2. Live updates: the htmx ws extension swaps the server's out-of-band
//    fragments. Each message ends with #ws-seq, which names the per-run event
//    sequence numbers it covers; when a run's numbers skip, the page asks the
//    server for a fresh snapshot ({"type": "resync"}).
"use strict";

(function () {
  // Reconnect quickly and keep trying every few seconds, never minutes: an
  // operator's page must converge soon after a server or network comes back.
  if (window.htmx) {
    window.htmx.config.wsReconnectDelay = function (retry) {
      return Math.min(5000, 500 * Math.pow(2, retry)) * (0.5 + Math.random() / 2);
    };
  }
  const lastSeq = new Map(); // run id -> highest sequence number seen
  let socket = null; // the ws extension's socket wrapper, once open
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  const localFormat = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "2-digit", day: "2-digit",
    hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short",
  });

  function span(seconds) {
    const s = Math.floor(Math.abs(seconds));
    const d = Math.floor(s / 86400);
    const h = Math.floor((s % 86400) / 3600);
    const m = Math.floor((s % 3600) / 60);
    const sec = s % 60;
    const pad = (n) => String(n).padStart(2, "0");
    return (d ? d + "d " : "") + h + "h " + pad(m) + "m " + pad(sec) + "s";
  }

  function relative(seconds) {
    const s = Math.abs(seconds);
    const units = [[86400, "day"], [3600, "hour"], [60, "minute"], [1, "second"]];
    for (const [size, name] of units) {
      if (s >= size || size === 1) {
        const n = Math.floor(s / size);
        const text = n + " " + name + (n === 1 ? "" : "s");
        return seconds >= 0 ? "in " + text : text + " ago";
      }
    }
    return "";
  }

  function showLocal(root) {
    if (zone === "UTC" || zone === "Etc/UTC") return;
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      const abs = el.nextElementSibling;
      const holder = abs && abs.querySelector(".local-time");
      if (!holder || holder.dataset.filled) return;
      const when = new Date(el.getAttribute("datetime"));
      if (isNaN(when)) return;
      holder.textContent = " · " + localFormat.format(when);
      holder.dataset.filled = "1";
    });
  }

  function tick() {
    const now = Date.now();
    document.querySelectorAll("time.countdown[datetime]").forEach(function (el) {
      // Only an open wait counts down: a resolved one has no deadline left to meet.
      if (el.closest("[data-resolved]")) return;
      const left = (new Date(el.getAttribute("datetime")) - now) / 1000;
      const overdue = left <= 0;
      el.textContent = overdue ? "overdue by " + span(left) : "due in " + span(left);
      el.classList.toggle("overdue", overdue);
      const wait = el.closest("[data-wait]");
      if (wait) wait.classList.toggle("is-overdue", overdue);
    });
    document.querySelectorAll("time.moment[datetime]").forEach(function (el) {
      const when = new Date(el.getAttribute("datetime"));
      if (!isNaN(when)) el.textContent = relative((when - now) / 1000);
    });
  }

  function setLive(state, text) {
    const el = document.getElementById("live-status");
    if (!el) return;
    el.dataset.state = state;
    const label = el.querySelector(".live-text");
    if (label) label.textContent = text;
  }

  function resync() {
    if (!socket) return;
    socket.send(JSON.stringify({ type: "resync" }));
    // Visible state for people and tests: how often this page asked.
    document.body.dataset.resyncs = String(Number(document.body.dataset.resyncs || 0) + 1);
  }

  // Returns true when the numbers for some run skip one we never saw.
  function noteSequences(marker) {
    let gap = false;
    if (marker.kind === "snapshot") lastSeq.clear();
    (marker.seqs || []).forEach(function ([run, numbers]) {
      let last = lastSeq.get(run);
      numbers.forEach(function (n) {
        if (marker.kind !== "snapshot" && last !== undefined && n > last + 1) gap = true;
        if (last === undefined || n > last) last = n;
      });
      lastSeq.set(run, last);
    });
    return gap;
  }

  document.addEventListener("htmx:wsOpen", function (evt) {
    socket = evt.detail.socketWrapper;
    setLive("open", "Connected");
  });
  document.addEventListener("htmx:wsClose", function () {
    setLive("closed", "Disconnected, reconnecting…");
  });
  document.addEventListener("htmx:wsAfterMessage", function () {
    const el = document.getElementById("ws-seq");
    if (!el) return;
    let marker;
    try { marker = JSON.parse(el.dataset.marker || "{}"); } catch (e) { return; }
    // "Live updates paused" is the server's word (its hub could not reach the channel layer): only the
    // server's "Connected" ends it, not the periodic catch-up messages that still arrive meanwhile.
    const status = document.getElementById("live-status");
    if (!status || status.dataset.state !== "paused") setLive("open", "Connected");
    if (noteSequences(marker)) resync();
  });
  // A refused request (400) or an unreachable database (503) answers an htmx request with words aimed at
  // #request-notice (HX-Retarget): show them there, not as a failed swap; a later success clears them.
  document.addEventListener("htmx:beforeSwap", function (evt) {
    if (evt.detail.xhr.getResponseHeader("HX-Retarget") !== "#request-notice") return;
    evt.detail.shouldSwap = true;
    evt.detail.isError = false;
  });
  document.addEventListener("htmx:afterRequest", function (evt) {
    const notice = document.getElementById("request-notice");
    if (notice && evt.detail.successful && evt.detail.xhr.getResponseHeader("HX-Retarget") !== "#request-notice") {
      notice.replaceChildren();
    }
  });
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible") resync();
  });
  document.addEventListener("htmx:load", function (evt) { showLocal(evt.detail.elt); tick(); });
  document.addEventListener("htmx:oobAfterSwap", function () { showLocal(document); tick(); });
  document.addEventListener("DOMContentLoaded", function () {
    showLocal(document);
    tick();
    setInterval(tick, 1000);
  });
})();
