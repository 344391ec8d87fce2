"""The bridge between A2A and the agent, in rooms by the life of a request, each on a
floor above the next: the way in (requests/), the agent's turn (turns/), whose
conversation it is and where it works (conversations/), who asks and whether a message
answers a prompt (answers/), the parts it writes (parts); beside the turn, the tool
rules that decide without a person (rules/).

What is kept is tailagent/store/, what it costs is tailagent/cost/. Imports no agent
SDK: the agents are tailagent/agents/.
"""
