// Every admin page (templates/admin/base_site.html): names for what Django's stock widgets leave unnamed, and
// keyboard access to what scrolls. axe's WCAG 2 A/AA rules pass on each admin page (tests/e2e/test_every_page.py).
(function () {
  "use strict";

  // The filter box of a many-to-many selector: its label holds only an icon, whose aria-label a plain span may
  // not carry (aria-prohibited-attr). As an image, the icon's words name the label and so the box.
  function nameFilterIcons(root) {
    root.querySelectorAll(".search-label-icon[aria-label]:not([role])").forEach(function (icon) {
      icon.setAttribute("role", "img");
    });
  }

  // A date-and-time field is two boxes, and its label names neither: "Last login (date)", "Last login (time)".
  function nameSplitDateTimes(root) {
    root.querySelectorAll("p.datetime").forEach(function (p) {
      var row = p.closest(".form-row, .fieldBox");
      var label = row && row.querySelector("label");
      var field = label ? label.textContent.replace(/:\s*$/, "").trim() : "";
      p.querySelectorAll("input.vDateField, input.vTimeField").forEach(function (input) {
        if (!input.hasAttribute("aria-label") && field) {
          input.setAttribute("aria-label", field + (input.classList.contains("vDateField") ? " (date)" : " (time)"));
        }
      });
    });
  }

  // A tabular inline's boxes have column headings, no labels: "graph, row 1", "delete row 1".
  function nameTabularInlines(root) {
    root.querySelectorAll(".tabular table").forEach(function (table) {
      var headings = Array.prototype.map.call(table.querySelectorAll("thead th"), function (th) {
        return th.textContent.trim();
      });
      table.querySelectorAll("tbody tr.form-row").forEach(function (tr, index) {
        Array.prototype.forEach.call(tr.children, function (td, column) {
          td.querySelectorAll("input:not([type=hidden]), select, textarea").forEach(function (input) {
            if (input.labels && input.labels.length) return;
            if (input.hasAttribute("aria-label")) return;
            var heading = input.name.slice(-7) === "-DELETE" ? "delete" : headings[column] || input.name;
            input.setAttribute("aria-label", heading + ", row " + (index + 1));
          });
        });
      });
    });
  }

  // A document shown whole (a version's JSON) scrolls inside its box: the keyboard can reach and scroll it.
  function focusScrollers(root) {
    root.querySelectorAll("#content pre").forEach(function (pre) {
      if (!pre.hasAttribute("tabindex")) pre.setAttribute("tabindex", "0");
    });
  }

  function fix(root) {
    nameFilterIcons(root);
    nameSplitDateTimes(root);
    nameTabularInlines(root);
    focusScrollers(root);
  }

  // Django's widgets draw themselves on load, and inlines add rows later: name whatever appears.
  new MutationObserver(function () { fix(document); }).observe(document.documentElement, {childList: true, subtree: true});
  document.addEventListener("DOMContentLoaded", function () { fix(document); });
})();
