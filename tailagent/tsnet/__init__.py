"""tailagent as a tailnet node of its own: Tailscale's tsnet in this process.

`node.go` is the Go side (a c-shared library on tailscale.com's tsnet),
`library.py` loads it, `node.py` is the server's way onto the tailnet through it,
and `client.py` lets the CLI on the same box reach the tailnet through the
running server's node.
"""

# The systemd credential a unit hands the node's auth key in (`LoadCredential=`): the
# node reads it, `tailagent service install --tsnet` writes the unit that names it.
CREDENTIAL_NAME = "tailscale-authkey"
