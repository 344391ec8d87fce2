"""The way in, the bridge's top floor: a2a-sdk's request handler with tailagent's hooks
(handler), the checks a message passes before a turn (admission), how many sends run at
once (in_flight), the quick blocking send (quick, task_starts), a stream taken up again
(resumption) and tasks another server runs (peer_tasks). Below it: a turn's running,
attachments and budget reserve are turns/, how an answer is judged and who is asking
are answers/, merge, diff, discard and ownership are conversations/.
"""
