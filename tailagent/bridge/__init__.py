"""The bridge between A2A and the agent, in rooms by the life of a request: the way in
(requests/), whose conversation it is and where it works (conversations/), whether a
message answers a prompt (answers/), the agent's turn (turns/) and the tool rules that
decide without a person (rules/). What is kept is tailagent/store/, what it costs is
tailagent/cost/. Imports no agent SDK: the agents are tailagent/agents/.
"""
