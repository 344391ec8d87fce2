"""tailagent as a tailnet node of its own: Tailscale's tsnet in this process.

`node.go` is the Go side (a c-shared library on tailscale.com's tsnet),
`library.py` loads it, `node.py` is the server's way onto the tailnet through it,
`auth_key.py` finds the key it joins with, and `client.py` lets the CLI on the same
box reach the tailnet through the running server's node.
"""
