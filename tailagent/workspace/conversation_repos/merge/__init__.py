"""Merging a conversation's branch back into its base, on request only: the order of the
steps (merging.py), the scratch repository the merge is built in (quarantine.py), the
commit it lands (commit.py: its message, or a rebase) and the base's checkout moved to it
(base_checkout.py). What a merge's preview shows is patches.py's, one floor up, and the
directory's removal after a merge is removal.py's.
"""
