"""Web Push for the desk: a person told on their phone when the agent needs them, with
no account and no relay of ours.

The browser subscribes with the push service of its own maker (Google's, Mozilla's,
Apple's, Microsoft's) and hands the desk an endpoint and two keys; this server then
POSTs there an RFC 8291 payload only that browser can read, signed with an RFC 8292
VAPID key of its state dir. The parts, each with one job:

- `keys.py`: the VAPID key pair, made once per state dir (0600).
- `services.py`: which push services an endpoint may name (`desk.push_services`).
- `subscriptions.py`: each person's subscriptions, kept across restarts.
- `actions.py`: the one-use tokens behind a notification's Allow and Deny.
- `sender.py`: encrypts, signs and sends, off every turn's path, with retries.
- `alerts.py`: which save of a task is worth a notification, and to whom.
- `standing.py`: what the access policy says of a subscriber at the moment of sending.

Nothing here knows the desk's pages; the desk's routes (web/notifications/routes.py) use these.
"""
