// The tab bar, built from the registry (views.js GROUPS): a group per question, its label over
// its tabs, so the views read as a few places. Click, and the arrow keys between tabs as in the
// WAI-ARIA tabs pattern (in the registry's order, across groups).

import { GROUPS, VIEW_IDS } from "./views.js";

/** Build the tabs into `tablist`; returns them by view id. */
export function buildTabs(tablist) {
  const tabs = {};
  for (const group of GROUPS) {
    const box = document.createElement("div");
    box.className = "tab-group";
    box.setAttribute("role", "presentation");
    const label = document.createElement("span");
    label.className = "tab-group-label";
    label.id = `tab-group-${group.id}`;
    label.textContent = group.label;
    const row = document.createElement("div");
    row.className = "tab-group-tabs";
    row.setAttribute("role", "presentation");
    for (const view of group.views) {
      const tab = document.createElement("button");
      Object.assign(tab, { type: "button", id: `tab-${view.id}`, textContent: view.label, hidden: !!view.hidden });
      tab.setAttribute("role", "tab");
      tab.setAttribute("aria-controls", `view-${view.id}`);
      tab.setAttribute("aria-describedby", label.id);
      row.append(tab);
      tabs[view.id] = tab;
    }
    box.append(label, row);
    tablist.append(box);
  }
  return tabs;
}

/** Wire the tabs to `app.setView`. */
export function installTabs(app, tabs) {
  VIEW_IDS.forEach((view, i) => {
    tabs[view].addEventListener("click", () => app.setView(view));
    tabs[view].addEventListener("keydown", (ev) => {
      const n = VIEW_IDS.length;
      const to = { ArrowRight: (i + 1) % n, ArrowLeft: (i - 1 + n) % n, Home: 0, End: n - 1 }[ev.key];
      if (to === undefined) return;
      ev.preventDefault();
      app.setView(VIEW_IDS[to]);
      tabs[VIEW_IDS[to]].focus();
    });
  });
}
