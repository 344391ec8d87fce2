"""Answers: is a follow-up an answer, to which prompt, may this person give it, and
what follows on the live turn. The request path comes in by one door (judging.py:
bind, once, approver, the hold), the turn path by another (applying.py); behind them
reading.py says what a reply means, records.py who decided what, claims.py which
answer holds a prompt, waiting.py a prompt kept across restarts. Not here: the rules
and audit of permissions (turns/permissions.py), or when a turn parks (turns/pump.py).
"""
