"""Answers: is a follow-up an answer, to which prompt, and may this person give it.

The request path comes in by one door (judging.py: bind, once, approver, the hold);
behind it reading.py says what a reply means, records.py who decided what, claims.py
which answer holds a prompt, waiting.py a prompt kept across restarts, requester.py who
is asking (the person the bridge hands from room to room, conversations/ too). Above
it, in turns/: an answer applied to the live turn (applying.py), the rules and audit
of permissions (permissions.py), when a turn parks (pump.py).
"""
