"""What each person's work costs, from the figure a turn reports to the daily budget the
next turn is admitted against. Cost knows nothing of the bridge: a live turn is what
turns.LiveTurn says.

How a figure is checked and written (figures), the rows kept in the store (ledger), the
budgets (budgets), a turn's reports counted (turns), `tailagent usage` and `tailagent
budget` (commands), and the `--since WHEN` they share with `tailagent audit` (since).
Where the rows are opened is store/'s; when a turn is stopped for its budget is the
bridge's.
"""
