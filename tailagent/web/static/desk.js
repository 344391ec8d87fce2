// The desk's live parts: one EventSource per page, entries replaced in place by key,
// a title badge and a notification when a task starts waiting for you. Everything
// works without this script too (plain links and forms); it only keeps pages current.
"use strict";

(function () {
  const body = document.body;
  const url = body.dataset.events;
  const baseTitle = document.title;
  const live = document.getElementById("live");
  let waitingBefore = null;
  let dropped = false;

  // "4:14 PM" today, "Dec 2, 4:14 PM" before: the server writes UTC, the reader
  // reads their own clock. The full moment stays in the title (a long press).
  function localTimes(root) {
    const today = new Date().toDateString();
    root.querySelectorAll("time[datetime]").forEach((el) => {
      const when = new Date(el.getAttribute("datetime"));
      if (isNaN(when)) return;
      const clock = when.toLocaleTimeString([], { hour: "numeric", minute: "2-digit" });
      el.textContent = when.toDateString() === today ? clock
        : `${when.toLocaleDateString([], { month: "short", day: "numeric" })}, ${clock}`;
      el.title = when.toLocaleString();
    });
  }

  localTimes(document);
  if (!url) return;

  function say(text, kind) {
    live.hidden = !text;
    live.textContent = text;
    live.dataset.kind = kind || "";
  }

  function fragment(html) {
    const holder = document.createElement("template");
    holder.innerHTML = html;
    return holder.content.firstElementChild;
  }

  function findEntry(key) {
    for (const el of document.querySelectorAll("[data-key]")) {
      if (el.dataset.key === key) return el;
    }
    return null;
  }

  function upsert(item) {
    const old = findEntry(item.key);
    if (item.gone) {
      if (old) old.remove();
      return;
    }
    const fresh = fragment(item.html);
    if (!fresh) return;
    localTimes(fresh);
    if (old) {
      // A folded part the person opened stays open when its content grows.
      if (old.tagName === "DETAILS" && old.open) fresh.open = true;
      old.querySelectorAll("details[open]").forEach((d, i) => {
        const same = fresh.querySelectorAll("details")[i];
        if (same) same.open = true;
      });
      old.replaceWith(fresh);
      return;
    }
    const section = document.querySelector(`[data-section="${item.section}"]`);
    if (section) section.appendChild(fresh);
  }

  function onEntries(event) {
    const data = JSON.parse(event.data);
    if (data.reset) {
      document.querySelectorAll(".task [data-section] > [data-key]").forEach((el) => el.remove());
    }
    data.items.forEach(upsert);
    const task = document.querySelector(".task");
    if (task) task.dataset.lastEvent = event.lastEventId;
  }

  function onRows(event) {
    const data = JSON.parse(event.data);
    const rows = document.getElementById("rows");
    if (rows) {
      rows.innerHTML = data.html;
      localTimes(rows);
    }
    onWaiting(data.waiting);
  }

  function onWaiting(waiting) {
    document.title = waiting.length ? `(${waiting.length}) ${baseTitle}` : baseTitle;
    if (waitingBefore !== null && "Notification" in window &&
        Notification.permission === "granted") {
      waiting.filter((id) => !waitingBefore.includes(id)).forEach(tell);
    }
    waitingBefore = waiting;
  }

  // A task that starts waiting while this page is open. A device subscribed to the
  // server's push (notify.js marks the page) hears of it from there, with its Allow
  // and Deny; otherwise the page says it through the service worker, as Android's
  // Chrome allows no `new Notification` in a page, and by itself where there is none.
  function tell(id) {
    if (body.dataset.push === "on") return;
    const title = "tailagent: a task waits for you";
    const options = { body: "Open it to answer.", tag: id, data: { url: `/desk/tasks/${id}#ask` } };
    if ("serviceWorker" in navigator && navigator.serviceWorker.controller) {
      navigator.serviceWorker.ready.then((registration) => registration.showNotification(title, options));
      return;
    }
    const note = new Notification(title, options);
    note.onclick = () => { window.focus(); location.href = options.data.url; };
  }

  const task = document.querySelector(".task");
  const first = task && task.dataset.lastEvent ? `${url}?after=${encodeURIComponent(task.dataset.lastEvent)}` : url;
  const source = new EventSource(first);
  source.addEventListener("entries", onEntries);
  source.addEventListener("rows", onRows);
  source.addEventListener("waiting", (event) => onWaiting(JSON.parse(event.data).waiting));
  source.addEventListener("open", () => {
    if (dropped) {
      say("reconnected", "ok");
      setTimeout(() => { if (live.dataset.kind === "ok") say(""); }, 3000);
    }
    dropped = false;
  });
  source.addEventListener("error", () => {
    dropped = true;
    if (source.readyState === EventSource.CLOSED) {
      say("disconnected: reload the page", "down");
    } else {
      say("connection lost: reconnecting…", "down");
    }
  });
})();
