"""The fence around each conversation's agent (issue 41)."""
