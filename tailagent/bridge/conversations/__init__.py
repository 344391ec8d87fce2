"""A conversation (an A2A context): where it works and what its turns leave behind
(workplace), its agent session (sessions), whose it is (ownership), the short id a
person types for it (names), the merge, diff, discard and list asked of it (operations)
and what became of a listed task's branch (fates). Git itself is tailagent/workspace/;
owners are stored in tailagent/store/; a turn inside a conversation is turns/.
"""
