"""The desk's routes for a person's notifications: the installable app's manifest and
service worker (installable), a person's Web Push subscriptions (subscriptions), a
notification's Allow or Deny (answers), the JSON rules they share (json_rules), who a
subscription's person is now (policy), mounted on one blueprint (routes). The Web Push
machinery itself (keys, sending, action tokens) is tailagent/webpush/; A2A push
notifications are tailagent/webhooks/.
"""
