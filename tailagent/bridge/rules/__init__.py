"""Tool-use rules: a permission request allowed, denied or asked before a person is
(matching), a command line read as bash reads it (shell) and what is known of programs
by name (programs). The rules' settings are read in tailagent/config/; applying a
decision to a turn and auditing it is turns/permissions.py.
"""
