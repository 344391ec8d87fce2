"""Handing work to another tailagent across the tailnet, with the person carried along.

A hop is A2A from node to node; whois on the peer names the calling node, and the
person rides in the request as an actor chain (one entry per hop, each signed with
its node's card key). Here: the chain (`chain`), the keys it is checked against
(`node_keys`), the tailnet's tailagents an agent may hand work to (`directory`), the
calling side of a hop (`outbound`, `session`), and the tools an agent uses for it
(`tool_socket`, `mcp_stdio`).
"""
