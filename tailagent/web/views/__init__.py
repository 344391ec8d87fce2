"""What a desk page shows, below every route: a task cut into entries (transcript,
turn_changes, diffs, markdown), a conversation read as a chat, the shared task list,
the journals that keep open pages current (live), and the HTML made of them (render).
"""
