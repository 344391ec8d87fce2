"""A2A push notifications: a task's updates POSTed, signed, to the webhook a caller
named, once the URL is known to be one it may name (targets) and delivered (delivery).
Web Push to a person's phone is tailagent/webpush/, the desk's routes for it web/notifications/."""
