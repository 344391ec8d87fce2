"""What each person's work costs: how a figure is checked and written (figures), the
rows kept in the store (ledger), the budgets a turn is admitted against (budgets), a
turn's reports counted (turns), and `tailagent usage` and `tailagent budget` (commands).
Cost knows nothing of the bridge: a live turn is what turns.LiveTurn says. Where the rows
are opened is store/'s; when a turn is stopped for its budget is the bridge's.
"""
