"""Where the embedded node's auth key (or OAuth client secret) comes from: a key file
named in the settings, the systemd credential a unit hands it, or `TS_AUTHKEY`.

`serve` took `TS_AUTHKEY` out of the environment (process/secret_env.py), so it is read
from what the server was started with. `tailagent service install --tsnet` writes the
unit that names the credential; `tailagent doctor` asks here which key a start would use.
"""

from __future__ import annotations

from pathlib import Path

from tailagent.config import TsnetSettings
from tailagent.process import secret_env
from tailagent.tailnet.presence import PresenceError

# The systemd credential a unit hands the node's auth key in (`LoadCredential=`): the
# node reads it, `tailagent service install --tsnet` writes the unit that names it.
CREDENTIAL_NAME = "tailscale-authkey"


def auth_key(settings: TsnetSettings, environ: dict[str, str] | None = None) -> tuple[str, str]:
    """The auth key (or OAuth client secret) and where it came from; ("", "") for none.

    A configured key file wins, then the systemd credential, then TS_AUTHKEY."""
    environ = secret_env.environ() if environ is None else environ  # TS_AUTHKEY is there
    sources: list[tuple[Path, str]] = []
    if settings.auth_key_file is not None:
        sources.append((settings.auth_key_file, "tsnet.auth_key_file"))
    if environ.get("CREDENTIALS_DIRECTORY"):
        credential = Path(environ["CREDENTIALS_DIRECTORY"]) / CREDENTIAL_NAME
        if credential.exists():
            sources.append((credential, f"the systemd credential {CREDENTIAL_NAME}"))
    for path, where in sources:
        try:
            key = path.read_text().strip()
        except OSError as exc:
            raise PresenceError(
                f"cannot read the auth key in {path} ({where}): {exc.strerror}"
            ) from None
        if not key:
            raise PresenceError(f"{path} ({where}) is empty: put the auth key in it")
        return key, where
    key = environ.get("TS_AUTHKEY", "").strip()
    return (key, "TS_AUTHKEY") if key else ("", "")
