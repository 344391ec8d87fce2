"""The tailnet as this server meets it: the LocalAPI it asks who is calling, and the way
it is on the tailnet, through the box's tailscaled or as a node of its own.

The LocalAPI client, for tailscaled's socket and the embedded node's loopback alike
(localapi.py); one interface for the ways onto the tailnet (presence.py), the tailscaled
ones beside it: as the operator's `tailscale serve` left it, or with the `--tailnet` serve
entry tailagent writes itself (serve_entry.py); and the embedded node, Tailscale's tsnet
in this process (tsnet/: its Go source, loader and build)."""
