"""This tailagent's release, in a room of its own on the ground floor: the card, the ACP
handshake and `--version` name it, and each imports it from below instead of from the
package's face, which stands above every room."""

__version__ = "0.1.0"
