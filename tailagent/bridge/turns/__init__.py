"""An agent turn on this server: the a2a-sdk executor that routes to its parts
(executor), what a live turn keeps (runtime), starting one (start), publishing the
agent's events (pump, publish), the rules' decisions and their audit (permissions),
tasks taken back after a restart (restore) and the A2A TCK's scenarios (tck). Whether a
message may start a turn is requests/; whether it answers a prompt is answers/; what a
turn costs is tailagent/cost/.
"""
