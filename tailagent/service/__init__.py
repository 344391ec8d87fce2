"""`tailagent service install|uninstall` (commands.py), the unit they write and the
units shipped in `systemd/` (unit.py), how a value goes into a unit (values.py),
what they check first (checks.py) and what they ask systemd (systemd.py)."""

from tailagent.service.checks import SERVE_OPTIONS
from tailagent.service.commands import install, uninstall
from tailagent.service.unit import SHIPPED

__all__ = ["SERVE_OPTIONS", "SHIPPED", "install", "uninstall"]
