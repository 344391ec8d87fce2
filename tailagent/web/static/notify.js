// "Notify me": subscribes this browser to the server's Web Push, so a person hears of a
// waiting question with the page closed. Push needs a secure context (https, or
// http://127.0.0.1 on the box itself) and, on an iPhone, the desk added to the Home
// Screen; where either is missing, the button says so and how to get it.
"use strict";

(function () {
  const button = document.getElementById("notify");
  if (!button) return;
  let status = document.getElementById("notify-status");
  if (!status) {
    // What the button has to say goes right under the top bar, which never wraps.
    status = document.createElement("p");
    status.id = "notify-status";
    status.className = "notify-status";
    status.setAttribute("role", "status");
    status.hidden = true;
    button.closest("nav").after(status);
  }

  function say(text) {
    status.textContent = text;
    status.hidden = !text;
  }

  // A browser's registration or push service may never answer (a blocked service
  // worker, a push service it cannot reach): each such step waits this long, then says so.
  const STEP_SECONDS = 15;

  function within(promise, what, advice) {
    let timer;
    const late = new Promise((_, reject) => {
      const why = `${what} within ${STEP_SECONDS} seconds${advice}`;
      timer = setTimeout(() => reject(new Error(why)), STEP_SECONDS * 1000);
    });
    return Promise.race([promise, late]).finally(() => clearTimeout(timer));
  }

  function keyBytes(base64url) {
    const text = atob(base64url.replace(/-/g, "+").replace(/_/g, "/"));
    return Uint8Array.from(text, (c) => c.charCodeAt(0));
  }

  function whyNot() {
    if (!window.isSecureContext) {
      return `Notifications need HTTPS, and this page is plain http on ${location.host}. ` +
        "Open the desk at https://NODE.TAILNET.ts.net/desk/ instead: on the box, put " +
        "tailagent behind `tailscale serve --bg <its listen address>` (or restart it " +
        "with --tailnet, or --tsnet); both serve HTTPS with the tailnet's certificate.";
    }
    if (!("serviceWorker" in navigator)) return "This browser has no service workers.";
    if (!("PushManager" in window)) {
      if (/iPhone|iPad/.test(navigator.userAgent)) {
        return "On an iPhone, add the desk to the Home Screen first (Share, then Add to " +
          "Home Screen), open it from there and tap Notify me.";
      }
      return "This browser cannot receive Web Push.";
    }
    if ("Notification" in window && Notification.permission === "denied") {
      return "Notifications are blocked for this site: allow them in the browser's " +
        "site settings, then tap Notify me again.";
    }
    return "";
  }

  async function server() {
    const reply = await fetch("/desk/push/key", { credentials: "same-origin" });
    if (!reply.ok) throw new Error(`the server answered ${reply.status}`);
    return reply.json();
  }

  async function post(path, body) {
    const reply = await fetch(path, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    const said = await reply.json().catch(() => ({}));
    if (!reply.ok) throw new Error(said.error || `the server answered ${reply.status}`);
    return said;
  }

  function showOn(on) {
    button.textContent = on ? "Notifications on" : "Notify me";
    button.dataset.on = on ? "1" : "";
    document.body.dataset.push = on ? "on" : "";
    button.hidden = false;
  }

  async function subscribe(registration, known) {
    if (Notification.permission === "default") say("Allow notifications when the browser asks.");
    const permission = await Notification.requestPermission();
    if (permission !== "granted") {
      say(whyNot() || "Notifications were not allowed.");
      return;
    }
    say("Waiting for this browser's push service…");
    const subscription = await within(registration.pushManager.subscribe({
      userVisibleOnly: true, applicationServerKey: keyBytes(known.publicKey),
    }), "the browser's push service did not answer", " (the browser must reach it on the " +
      "internet): try again later or on another network");
    await post("/desk/push/subscriptions", { subscription: subscription.toJSON(), token: known.token });
    showOn(true);
    say(`You will be told on this device (${known.device}) when the agent needs you.`);
  }

  function register() {
    return within(navigator.serviceWorker.register("/desk/sw.js", { scope: "/desk/" }),
      "this browser did not set up the desk's service worker", " (private windows and " +
      "some settings block it): reload the page and tap Notify me again");
  }

  // A tap subscribes; it registers the service worker again first, so a start that
  // failed (the server restarting, a dropped connection) is mended by the tap. Until it
  // ends the button is off and the line under the bar says what it waits for.
  function turnOn() {
    button.disabled = true;
    say("Waiting for this browser to set up notifications…");
    register()
      .then((registration) => server().then((known) => subscribe(registration, known)))
      .catch((error) => say(`Notifications could not be turned on: ${error.message}.`))
      .finally(() => { button.disabled = false; });
  }

  async function start() {
    const problem = whyNot();
    if (problem && (!window.isSecureContext || !("serviceWorker" in navigator) ||
        !("PushManager" in window))) {
      showOn(false);
      button.addEventListener("click", () => say(problem));
      return;
    }
    button.addEventListener("click", () => {
      if (button.dataset.on) location.href = "/desk/notifications";
      else turnOn();
    });
    showOn(false);  // a tap works now; whether this device is on comes once the browser says
    const registration = await register();
    const known = await server();
    const current = await registration.pushManager.getSubscription();
    showOn(Boolean(current && known.subscriptions.some((s) => s.endpoint === current.endpoint)));
  }

  start().catch(() => showOn(false));
})();
