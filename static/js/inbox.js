// The waits a person owns (issue 30 §7). No inline scripts: the CSP forbids them.
//
// 1. The tab title starts with the count of open waits the user owns, "(3) Waits · Sidewisp", kept current
//    from the header's #my-waits marker, which the live socket replaces when it changes.
// 2. With the user's permission (asked only when they press the inbox's button, never on load), a browser
//    notification when a wait assigned to them opens while the page is in the background; it links to
//    the wait's confirm page.
// 3. The inbox's batch form: its buttons say how many waits are picked and stay off until some are.
"use strict";

(function () {
  // The live socket sends this user's count only when asked: the page's socket address asks for it (deferred
  // scripts run before htmx connects on DOMContentLoaded).
  document.querySelectorAll("[ws-connect]").forEach(function (el) {
    el.setAttribute("ws-connect", el.getAttribute("ws-connect") + "&title=1");
  });

  let known = null; // the wait ids the marker named last time (null: not read yet, nothing to notify)

  function plainTitle() {
    return document.title.replace(/^\(\d+\) /, "");
  }

  function notify(link) {
    if (!("Notification" in window) || Notification.permission !== "granted" || !document.hidden) return;
    const note = new Notification("A wait is assigned to you", {
      body: "Wait " + link.textContent + " needs your decision.",
      tag: "sidewisp-wait-" + link.dataset.wait,
      data: { url: link.href },
    });
    note.onclick = function () {
      window.focus();
      window.location.assign(link.href);
    };
  }

  function readMarker() {
    const marker = document.getElementById("my-waits");
    if (!marker || marker.hasAttribute("data-unread")) return; // the page's placeholder: the socket sends the facts
    const count = parseInt(marker.dataset.count || "0", 10) || 0;
    document.title = (count > 0 ? "(" + count + ") " : "") + plainTitle();
    const links = Array.from(marker.querySelectorAll("a[data-wait]"));
    if (known !== null) links.filter((a) => !known.has(a.dataset.wait)).forEach(notify);
    known = new Set(links.map((a) => a.dataset.wait));
  }

  function showPermission() {
    const ask = document.getElementById("notify-ask");
    const state = document.getElementById("notify-state");
    if (!ask || !state) return;
    if (!("Notification" in window)) {
      state.textContent = "This browser cannot show notifications.";
      ask.hidden = true;
      return;
    }
    const permission = Notification.permission;
    ask.hidden = permission !== "default";
    state.textContent = {
      granted: "Notifications are on: a wait assigned to you is announced while this tab is in the background.",
      denied: "Notifications are blocked for this site in your browser's settings.",
      default: "",
    }[permission] || "";
  }

  function askPermission() {
    if (!("Notification" in window)) return;
    Promise.resolve(Notification.requestPermission()).then(showPermission, showPermission);
  }

  function batchButtons() {
    const form = document.getElementById("batch-form");
    if (!form) return;
    const picked = document.querySelectorAll('input.pick[form="batch-form"]:checked').length;
    form.querySelectorAll("button[data-batch]").forEach(function (button) {
      button.disabled = picked === 0;
    });
    const count = document.getElementById("batch-count");
    if (count) count.textContent = picked + " selected";
  }

  document.addEventListener("htmx:oobAfterSwap", function () {
    readMarker(); // new wait ids only are announced: reading an unchanged marker again does nothing
    batchButtons();
  });
  document.addEventListener("change", function (evt) {
    if (evt.target && evt.target.matches && evt.target.matches("input.pick")) batchButtons();
  });
  document.addEventListener("DOMContentLoaded", function () {
    readMarker();
    showPermission();
    batchButtons();
    const ask = document.getElementById("notify-ask");
    if (ask) ask.addEventListener("click", askPermission);
  });
})();
