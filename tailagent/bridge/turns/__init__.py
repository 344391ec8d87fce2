"""An agent turn on this server: the a2a-sdk executor that routes to its parts
(executor), what a live turn keeps (runtime), starting one (start) with its
attachments and its budget reserve (reservations), publishing the agent's events (pump,
publish), the rules' decisions and their audit (permissions), an answer applied to a
parked turn (applying), tasks taken back after a restart (restore) and the A2A TCK's
scenarios (tck). Whether a message may start a turn is requests/ (above); whether it
answers a prompt is answers/, its conversation conversations/ (below); what a turn
costs is tailagent/cost/.
"""
