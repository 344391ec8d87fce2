"""What every concern of the conversations' repositories stands on: git run in a repository
named outright (repository.py), a `.git` checked before tailagent's git runs there
(guard.py) and a work tree before git reads it (specials.py), git dirs read as plain files
(gitdirs.py), git's machine output parsed (porcelain.py), the few file-system calls the
async code makes (fs.py), and the ways an operation fails that every concern raises and
the bridge catches (errors.py). Nothing here knows of records, turns or merges: what a
conversation's directory is, and what is done with it, lives a floor up.
"""
