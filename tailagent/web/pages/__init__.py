"""The desk's pages: routes by what they do (viewing, conversation, streams, actions,
merging, signin), and what they show, as pure reads of a task (transcript,
turn_changes, diffs, markdown) or of a conversation's tasks (chat), what is read of a
conversation when a page is drawn (standing), the shared task list (task_lists) and
the journals that keep open pages current (live). The app, its rules and the kit every
route is given are web/; Web Push's routes are web/push/.
"""
