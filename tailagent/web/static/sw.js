// The desk's service worker: shows the server's Web Push messages when no page is
// open, opens the task at its question on a tap, and answers a permission prompt from
// the notification's Allow and Deny with the one-use token the message carried.
"use strict";

self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));

function readMessage(event) {
  if (!event.data) return {};
  try {
    return event.data.json();
  } catch (_) {
    return { title: "tailagent", body: event.data.text() };
  }
}

self.addEventListener("push", (event) => {
  const message = readMessage(event);
  const options = {
    body: message.body || "",
    tag: message.tag || undefined,
    renotify: Boolean(message.tag),
    requireInteraction: message.kind === "permission" || message.kind === "question",
    icon: "/desk/static/icon-192.png",
    badge: "/desk/static/icon-192.png",
    data: { url: message.url || "/desk/", token: message.token || "", tag: message.tag || "" },
  };
  if (message.token) {
    options.actions = [
      { action: "allow", title: "Allow" },
      { action: "deny", title: "Deny" },
    ];
  }
  event.waitUntil(self.registration.showNotification(message.title || "tailagent", options));
});

async function openPage(url) {
  // A desk already open is brought to the task (the one showing it first); otherwise a
  // new window opens there.
  const target = new URL(url, self.location.origin);
  const windows = await self.clients.matchAll({ type: "window" });
  const open = windows.find((c) => new URL(c.url).pathname === target.pathname) ||
    windows.find((c) => new URL(c.url).pathname.startsWith("/desk/"));
  if (!open) return self.clients.openWindow(target.href);
  try {
    await open.focus();
  } catch (_) {
    // Focus needs the person's tap; the page is still brought to the task.
  }
  return open.navigate(target.href);
}

async function answer(action, data) {
  let reply;
  try {
    reply = await fetch("/desk/push/answer", {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ token: data.token, action: action }),
    });
  } catch (_) {
    reply = null;
  }
  if (reply && reply.ok) {
    const word = action === "allow" ? "Allowed" : "Denied";
    return self.registration.showNotification(`${word} from this notification`, {
      body: "Tap to follow the task.", tag: data.tag || undefined, silent: true,
      icon: "/desk/static/icon-192.png", data: { url: data.url, tag: data.tag },
    });
  }
  let why = "the server could not be reached";
  if (reply) {
    try {
      why = (await reply.json()).error || `the server answered ${reply.status}`;
    } catch (_) {
      why = `the server answered ${reply.status}`;
    }
  }
  return self.registration.showNotification("Not answered", {
    body: `${why}. Tap to answer on the task's page.`, tag: data.tag || undefined,
    icon: "/desk/static/icon-192.png", data: { url: data.url, tag: data.tag },
  });
}

self.addEventListener("notificationclick", (event) => {
  const note = event.notification;
  const data = note.data || {};
  note.close();
  if ((event.action === "allow" || event.action === "deny") && data.token) {
    event.waitUntil(answer(event.action, data));
  } else {
    event.waitUntil(openPage(data.url || "/desk/"));
  }
});
