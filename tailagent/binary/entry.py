"""The one-file binary's entry point: the `tailagent` command itself, and the card's
signing process the server starts (a frozen binary has no `python -m`)."""

import sys

from tailagent.card.publish import SIGNER_ARGUMENT

if sys.argv[1:2] == [SIGNER_ARGUMENT]:
    from tailagent.card.signer import main

    main()
else:
    from tailagent.cli import run

    run()
