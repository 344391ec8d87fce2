"""The box owner's commands on this box's own state, run without a server: `tailagent
token` (tokens), `tailagent audit` (audit), `tailagent doctor` (doctor), and how their
tables print (tables). The command line itself is cli.py's; `tailagent usage` and
`tailagent budget` are cost/'s, `tailagent keys` card/'s.
"""
