"""How conversations end: which directories go at a discard or a start's prune, and what a
person is told (cleanup.py); what a state dir holds that is nobody's, for `doctor` and
`tailagent clean` (holdings.py). It stands on the concerns it ends (ahead, idle, merge/)
and on removal.py one floor down, the one way a directory is taken away.
"""
