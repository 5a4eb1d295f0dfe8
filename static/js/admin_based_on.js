// The contract version add form: choosing another "Based on" reloads the form prefilled from that
// version (?from=<id>, or ?from=none for nothing), so its routes and steps are what the review compares.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const select = document.querySelector("select[data-reload-param]");
  if (!select) return;
  let chosen = select.value;
  select.addEventListener("change", () => {
    const routes = document.getElementById("id_routes");
    const edited = routes && routes.value !== routes.defaultValue;
    if (edited && !window.confirm("Replace your edits to the routes with the chosen version's routes?")) {
      select.value = chosen;
      return;
    }
    chosen = select.value;
    const url = new URL(window.location.href);
    url.searchParams.set(select.dataset.reloadParam, select.value || "none");
    window.location.assign(url.toString());
  });
});
