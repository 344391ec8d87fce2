"""The desk's HTTP routes for Web Push: the installable app's manifest and service worker
(installable), a person's subscriptions (subscriptions), a notification's Allow or Deny
(answers), the JSON rules they share (json_rules), who a subscription's person is now
(policy), mounted on one blueprint (routes). The Web Push machinery itself (keys,
sending, action tokens) is tailagent/webpush/; A2A push notifications are tailagent/push/.
"""
