"""The desk's browser routes, one module per concern (viewing, conversation, streams,
actions, merging, signin), each registered on the desk's blueprint with a `DeskKit`.
"""
