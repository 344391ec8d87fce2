"""How conversations' directories end: one directory and its record taken away, and
retired ones deleted in the background (removal.py); which go at a discard or a start's
prune, and what a person is told (cleanup.py); what a state dir holds that is nobody's,
for `doctor` and `tailagent clean` (holdings.py). A merge's own steps live in merge/.
"""
