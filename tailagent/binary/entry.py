"""The one-file binary's entry point: the `tailagent` command itself, the card's
signing process the server starts, and the MCP server of tailagent's own tools an ACP
agent starts (a frozen binary has no `python -m`)."""

import sys

# The package first (tailagent.process.undumpable runs before anything else of ours), then,
# before any work, this process is bound to the bootloader's life (bootloader.py).
from tailagent.binary.bootloader import die_with_the_bootloader

die_with_the_bootloader()

from tailagent.card.publish import SIGNER_ARGUMENT  # noqa: E402
from tailagent.delegation.tool_socket import MCP_ARGUMENT  # noqa: E402

if sys.argv[1:2] == [SIGNER_ARGUMENT]:
    from tailagent.card.signer import main

    main()
elif sys.argv[1:2] == [MCP_ARGUMENT]:
    from tailagent.delegation.mcp_stdio import main as serve_tools

    sys.exit(serve_tools(sys.argv[2:]))
else:
    from tailagent.cli import run

    run()
