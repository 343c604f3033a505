// The operator console's one script: refreshes the live figures, loads a chosen rules
// file into the text box, asks before a revocation. No framework, no build.
"use strict";

(function () {
  const DASH = "\u2014";
  const num = (v) => (v == null ? DASH : Number.isInteger(v) ? v.toLocaleString("en-US")
    : v.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 }));
  // the same formats as gateway/console/render.py's filters
  const FORMATS = {
    num: num,
    ms: (v) => (v == null ? DASH : v < 10 ? `${Math.round(v * 1000)} ms` : `${v.toFixed(1)} s`),
    rate: (v) => (v == null ? DASH : `${v.toFixed(2)}/s`),
    pct: (v) => (v == null ? DASH : `${Math.round(v * 100)} %`),
    counts: (d) => {
      const items = Object.entries(d || {}).filter(([, n]) => n);
      if (!items.length) return DASH;
      items.sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
      return items.map(([k, n]) => `${k} ${num(n)}`).join(" \u00b7 ");
    },
    updown: (v) => (v == null ? DASH : v ? "up" : "down"),
    circuit: (v) => (v == null ? DASH : v ? "open" : "closed"),
    secs: (v) => (v == null ? DASH : v.toFixed(0)),
    text: (v) => (v == null ? DASH : String(v)),
  };
  const PILLS = { updown: (v) => !!v, circuit: (v) => !v };  // true: shown as healthy

  function at(data, path) {
    return path.reduce((o, k) => (o == null ? undefined : o[k]), data);
  }

  function show(el, data) {
    const how = el.dataset.fmt;
    const v = at(data, JSON.parse(el.dataset.live));
    el.textContent = (FORMATS[how] || FORMATS.text)(v);
    if (PILLS[how]) el.className = "pill " + (v == null ? "" : PILLS[how](v) ? "ok" : "bad");
  }

  function live(root) {
    const url = root.dataset.liveUrl;
    const every = Number(root.dataset.liveEvery) || 3000;
    const status = document.getElementById("live-status");
    async function tick() {
      try {
        const r = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
        if (r.status === 401) {
          location.assign("/console/login?next=" + encodeURIComponent(location.pathname));
          return;
        }
        if (!r.ok) throw new Error(`HTTP ${r.status}`);
        const data = await r.json();
        root.querySelectorAll("[data-live]").forEach((el) => show(el, data));
        if (status) status.textContent = "updated " + new Date().toLocaleTimeString();
        root.dataset.liveUpdates = String(Number(root.dataset.liveUpdates || 0) + 1);
      } catch (e) {
        if (status) status.textContent = "not updated: " + e.message;
      }
      setTimeout(tick, every);
    }
    setTimeout(tick, every);
  }

  function loadFiles() {
    document.querySelectorAll("input[type=file][data-load-into]").forEach((input) => {
      input.addEventListener("change", () => {
        const file = input.files && input.files[0];
        const into = document.getElementById(input.dataset.loadInto);
        if (!file || !into) return;
        file.text().then((text) => {
          into.value = text;
          input.value = "";  // the text box is now what is sent
          into.dataset.loadedFrom = file.name;
        });
      });
    });
  }

  function confirms() {
    document.querySelectorAll("form[data-confirm]").forEach((form) => {
      form.addEventListener("submit", (ev) => {
        if (!window.confirm(form.dataset.confirm)) ev.preventDefault();
      });
    });
  }

  function examples() {
    document.querySelectorAll("button[data-example-for]").forEach((button) => {
      button.addEventListener("click", () => {
        const into = document.getElementById(button.dataset.exampleFor);
        if (!into) return;
        into.value = button.dataset.example;
        into.focus();
      });
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    const root = document.querySelector("[data-live-url]");
    if (root) live(root);
    loadFiles();
    confirms();
    examples();
  });
})();
