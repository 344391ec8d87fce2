"""The way in: a2a-sdk's request handler with tailagent's hooks (handler), the checks a
message passes before a turn (admission), its attachments, who sent it (requester), how
many sends run at once (in_flight), the quick blocking send (quick, task_starts) and
tasks another server runs (peer_tasks). How an answer is judged is answers/, a turn's
running is turns/, merge, diff, discard and ownership are conversations/.
"""
