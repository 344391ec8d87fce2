"""How the server is on the tailnet through the box's tailscaled: as the operator's
`tailscale serve` left it, or with the `--tailnet` serve entry tailagent writes itself
(serve_entry.py), both behind one interface (presence.py). The embedded node (`--tsnet`)
is tailagent/tsnet/; tailscaled's LocalAPI client is access/localapi.py."""
