"""What is kept: the tasks (tasks.py in front of a2a-sdk's table, table.py), the
context -> agent session map, who owns each conversation, the audit log, the signals
between servers that share a store, spent notification tokens, and the SQL under them
all, said once for SQLite and PostgreSQL (database.py); opening.py opens it at start.
Not here: what things cost (cost/, whose ledger sits in the same database) and what a
turn does with a task (bridge/).
"""
